"""A 2-process CPU DDP training run of the tiny stream model, for tests/integration/test_ddp.py:

    python ddp_script.py OUT ITERATIONS [auto] [selfplay]
    torchrun --nnodes 2 --node-rank N --nproc-per-node 1 ... ddp_script.py OUT ITERATIONS nodes [auto]

trains `configs/smoke.yaml` (tiny overrides) for ITERATIONS iterations under OUT/runs, resuming
the newest checkpoint there with `auto`; with DDP_SCRIPT_REFERENCE=FILE.npz in the environment, its reference set
is the one saved there rather than embedded again. Lightning's `ddp` strategy re-executes this script (same
argv, LOCAL_RANK=1) as rank 1; with `nodes`, each of two torchrun "nodes" on this host runs one rank
(trainer.num_nodes=2, trainer.devices=1), their collectives timing out after NODES_TIMEOUT seconds.
At the end of training each rank saves OUT/rank{r}.pt: its archive, global_step, buffer and minibatch sizes,
the module's weights and its pid; once train() returns, OUT/rank{r}.returned.json: the run folder it returned and
whether it left the process group behind. Rank 0 then waits for rank 1 to exit, so that when the command returns
both ranks (and their sandboxes) are gone.

With `selfplay` the Solver learns by BC after every iteration (`selfplay.learn_every=1`), with stand-ins
patched in here, so in both ranks' processes: each rank's Setter streams write the same two valid puzzles
every iteration, `x == 7 + rank` and one no answer solves; every Solver LLM answers from the puzzle at the
end of its prompt, a body drawn by the generator it is given (several right ones, a few wrong); our corpus
is a few puzzles in memory. Each rank's record then also holds its replay buffer's pairs, its Solver
adapters (at the start and the end) and the verified pairs its own Solver found, per iteration.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import sys
from pathlib import Path

import lightning as L
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the tiny model and tokenizer

from support import CONFIGS, ScriptedLLM, build_char_tokenizer, stream_llama  # noqa: E402

from codeplay_lightning import train as train_module  # noqa: E402
from codeplay_lightning.config import load_config  # noqa: E402
from codeplay_lightning.puzzles import Puzzle  # noqa: E402
from codeplay_lightning.setter import rollout_callback, selfplay  # noqa: E402
from codeplay_lightning.setter.ranks import rank  # noqa: E402
from codeplay_lightning.setter.rollout import Episode  # noqa: E402
from codeplay_lightning.setter.rollout_callback import RolloutCallback  # noqa: E402
from codeplay_lightning.solver.learning import verified_pairs  # noqa: E402
from codeplay_lightning.train import train  # noqa: E402

REFERENCE_FILE = "DDP_SCRIPT_REFERENCE"  # the environment variable naming a saved reference set (.npz)
HANG_SECONDS = 240  # a run takes ~20 s; the test's own timeout is longer
NODES_TIMEOUT = 30  # seconds a rank of `nodes` waits for the other in a collective
# like test_training.tiny_config, with more minibatches than a rank has puzzles: some minibatches are
# empty on one rank only, which must still step (and log) with the other
OVERRIDES = [
    "trainer.precision=32-true",
    "model.name=tiny-stream",
    "rollout.n_envs=2",
    "rollout.n_steps=40",
    "solver.max_new_tokens=24",
    "ppo.lr=1e-3",
    "ppo.n_minibatches=6",
    "ppo.ppo_epochs=1",
    "sandbox.workers=1",
    "trainer.strategy=ddp",
    "trainer.devices=2",
    "trainer.accelerator=cpu",
]


SELFPLAY_OVERRIDES = [
    "ppo.n_minibatches=2",
    "selfplay.learn_every=1",
    "solver.attempts=4",
    "solver.batch_size=4",
    "selfplay.lora_rank=2",
    "selfplay.bc_lr=1e-3",
    "selfplay.bc_batch_size=4",
    "selfplay.solutions_per_puzzle=5",  # more than there are right bodies: the cap never refuses a new pair
    "selfplay.eval_heldout=2",
    "selfplay.eval_attempts=2",
]
# the bodies the Solver stand-in draws from for `return x == N`: RIGHT ones, then wrong ones (often enough that
# an iteration's attempts seldom all pass: BC learns only from puzzles some attempt failed)
RIGHT = ("{n}", "{n} * 1", "abs({n})")
WRONG = ("{n} + 1", "'{n}'")
TARGET = re.compile(r"return x == (\d+)\n\ndef g\(\):$")


def rank_puzzles(rank: int) -> list[str]:
    """What rank `rank`'s Setter streams write every iteration: a puzzle its Solver solves, one nobody can."""
    return [f"def f(x: int):\n    return x == {7 + rank}", f"def f(x: int):\n    return x * x == -{1 + rank}"]


def write_rank_puzzles(model, tokenizer, *args) -> tuple[list[Episode], int]:
    """Stands in for `generate_episodes`: this rank's puzzles (sampler log-probs 0: no sampler wrote them)."""
    episodes = []
    for text in rank_puzzles(rank()):
        ids = torch.tensor(tokenizer(text + "\n\n")["input_ids"])
        episodes.append(Episode(text, ids, torch.zeros(len(ids))))
    return episodes, 0


class AnsweringLLM(ScriptedLLM):
    """Stands in for every Solver HFLLM (same arguments): for `return x == N`, a body drawn from RIGHT and WRONG
    by the generator it is given; for any other puzzle, a wrong one."""

    def __init__(self, model, tokenizer, sampling, *, chat: bool, batch_size: int, generator):
        super().__init__(self.answer_puzzle)
        self.generator = generator

    def answer_puzzle(self, prompt: str) -> str:
        target = TARGET.search(prompt)
        if target is None:
            return "\n    return 1"
        bodies = RIGHT + WRONG
        body = bodies[int(torch.randint(0, len(bodies), (1,), generator=self.generator))]
        return "\n    return " + body.format(n=target.group(1))


CORPUS = [Puzzle("corpus:0", "def f(x: int):\n    return x + 1 == 5", ("def g():\n    return 4",), "int")]
HELDOUT = [Puzzle(f"heldout:{n}", f"def f(x: int):\n    return x == {n}", (), "int") for n in (3, 4)]
VERIFIED: list[list[tuple[str, str]]] = []  # this rank's own verified pairs, a list per iteration


def recording_verified_pairs(results):
    pairs = verified_pairs(results)
    VERIFIED.append([(pair.f, pair.solutions[0]) for pair in pairs])
    return pairs


def patch_selfplay() -> None:
    """The stand-ins of self-play mode, in this process (rank 0's, or rank 1's when Lightning re-executes us)."""
    rollout_callback.generate_episodes = write_rank_puzzles
    train_module.HFLLM = selfplay.HFLLM = AnsweringLLM
    train_module.selfplay_corpus = lambda *args: (CORPUS, HELDOUT)
    selfplay.verified_pairs = recording_verified_pairs


def patch_reference_set(path: Path) -> None:
    """The reference set as the test session embedded and saved it (REFERENCE_FILE), in this process: embedding it
    again in each rank of each run cost 6 to 14 s a rank. The script trains the smoke preset's, as saved."""
    saved = np.load(path)
    train_module.reference_set = lambda embedder, reward: (saved["embeddings"], float(saved["distance"]))


def rollout_of(trainer: L.Trainer) -> RolloutCallback:
    return next(callback for callback in trainer.callbacks if isinstance(callback, RolloutCallback))


def learner_of(trainer: L.Trainer):
    """The learning Solver of the run's rollout callback, or None when the Solver does not learn."""
    rollout = rollout_of(trainer)
    return None if rollout.selfplay is None else rollout.selfplay.learner


def adapters_of(learner) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in learner.model.named_parameters() if p.requires_grad}


class RecordRank(L.Callback):
    """Saves what this rank ended with; on rank 0, keeps the rank processes Lightning launched."""

    def __init__(self, out: Path):
        self.out, self.buffer_sizes, self.batch_sizes, self.children, self.rank = out, [], [], [], 0
        self.initial_adapters = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.rank = trainer.global_rank  # kept: once train() returns, the process group is gone
        self.children = list(getattr(trainer.strategy.launcher, "procs", []))  # rank 0: rank 1's Popen
        learner = learner_of(trainer)
        if learner is not None:  # as initialised: a resumed run loads its checkpoint's later
            self.initial_adapters = adapters_of(learner)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.buffer_sizes.append(len(trainer.datamodule.buffer))  # after the rollout callback filled it

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch_sizes.append(len(batch["mask"]))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        ppo = trainer.datamodule.ppo
        learner = learner_of(trainer)
        selfplay_record = {}
        if learner is not None:
            selfplay_record = {
                "replay": learner.replay.state_dict()["pairs"],  # (name, f, g, ans_type) in arrival order
                "phases": learner.phases,
                "initial_adapters": self.initial_adapters,
                "adapters": adapters_of(learner),
                "verified": VERIFIED,
            }
        torch.save(
            {
                **selfplay_record,
                "pid": os.getpid(),
                "world_size": trainer.world_size,
                "global_step": trainer.global_step,
                "steps_per_iteration": ppo.ppo_epochs * ppo.n_minibatches,
                "archive": rollout_of(trainer).novelty.archive.state_dict(),
                "buffer_sizes": self.buffer_sizes,
                "batch_sizes": self.batch_sizes,
                "state_dict": {name: value.detach().clone() for name, value in pl_module.state_dict().items()},
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )


NODES_OVERRIDES = ["trainer.devices=1", "trainer.num_nodes=2", f"trainer.collective_timeout={NODES_TIMEOUT}"]


def main(out: Path, iterations: int, resume: str | None, selfplay_mode: bool, nodes: bool) -> None:
    # a hung collective blocks the main thread in C++, where SIGTERM is never handled: print every
    # thread's stack and exit instead, so that the test's log shows where it hung
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    tokenizer = build_char_tokenizer()
    overrides = [*OVERRIDES, *(SELFPLAY_OVERRIDES if selfplay_mode else []), *(NODES_OVERRIDES if nodes else [])]
    if selfplay_mode:
        patch_selfplay()
    if REFERENCE_FILE in os.environ:
        patch_reference_set(Path(os.environ[REFERENCE_FILE]))
    config = load_config(
        [CONFIGS / "smoke.yaml"], [f"trainer.run_root={out / 'runs'}", f"trainer.iterations={iterations}", *overrides]
    )
    record = RecordRank(out)
    run_dir = train(config, resume=resume, policy=stream_llama(tokenizer), tokenizer=tokenizer, callbacks=[record])
    returned = {"run_dir": str(run_dir), "group_left": torch.distributed.is_initialized()}  # what train() left
    (out / f"rank{record.rank}.returned.json").write_text(json.dumps(returned))
    for child in record.children:
        child.wait(timeout=HANG_SECONDS)


if __name__ == "__main__":
    words = sys.argv[3:]
    unknown = set(words) - {"auto", "selfplay", "nodes"}
    if unknown:
        sys.exit(f"unknown arguments {sorted(unknown)}: give OUT ITERATIONS [auto] [selfplay] [nodes]")
    main(
        Path(sys.argv[1]), int(sys.argv[2]), "auto" if "auto" in words else None, "selfplay" in words, "nodes" in words
    )
