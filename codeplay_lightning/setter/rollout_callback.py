"""`RolloutCallback`: one PPO iteration's data at the start of each Lightning epoch.

Samples puzzles from the Setter, scores them (Solver, sandbox, novelty archive), and hands the datamodule a
`PPOBuffer` with old log-probs, values, KL-penalised rewards, GAE advantages and returns; at the epoch's end, a
learning Solver's BC phase when one is due. The steps themselves are plain functions
(`codeplay_lightning.setter.rollout`, `.selfplay`); this callback orders and times them, hands what they give
to the run's records (`RunRecords`), and checkpoints the rollout's state: the generators, the archive,
self-play's learner and the records' counters.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn

from codeplay_lightning.allocator import peak_rss_gib, reset_peak_rss
from codeplay_lightning.archive import NoveltyArchive
from codeplay_lightning.config import TrainConfig, run_identity
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm.interface import LLMUsage
from codeplay_lightning.setter.module import SetterPPOModule
from codeplay_lightning.setter.progress import Progress
from codeplay_lightning.setter.ranks import from_every_rank, gather_puzzles, rank
from codeplay_lightning.setter.records import RankRollout, RunRecords, iteration_record
from codeplay_lightning.setter.rollout import (
    build_buffer,
    generate_episodes,
    judge_puzzles,
    judged_by_the_sandbox,
    novelty_distances,
    rank_share,
    reward_puzzles,
)
from codeplay_lightning.setter.selfplay import SelfPlay, initial_difficulties
from codeplay_lightning.solver import Solver

log = logging.getLogger("codeplay_lightning")


@dataclass(frozen=True)
class RewardSolver:
    """The Solver whose attempts give R_d, and what the callback moves and counts of it: its sandbox (whose busy time
    the iteration's record counts apart from the models'), its LLM's token counters, a local model of its own to move
    to the trainer's device (None when it samples from the module's frozen weights, which move with the module, or
    from a server), and whether it samples from the module's frozen weights (with LoRA: the policy, adapters off)."""

    solver: Solver
    sandbox: Sandbox
    usage: LLMUsage
    model: nn.Module | None
    on_frozen_weights: bool


@dataclass(frozen=True)
class Novelty:
    """R_n's inputs: the embedder, the archive of every puzzle generated so far, and the reference set's mean
    pairwise distance that normalises the distances."""

    embedder: object
    archive: NoveltyArchive
    reference_distance: float


class RolloutCallback(L.Callback):
    """`generator` drives the iteration's sampling: the Setter's streams here, and the Solver, whose LLM
    (and search seeds) draw from the same generator object; it is seeded per rank and checkpointed here.
    `reward` is the Solver that rewards the puzzles; `novelty` scores them against the archive. `selfplay` (None:
    the Solver stays the initial one) holds the learning Solver, which `reward`'s samples from, and the initial
    Solver; the callback re-judges, collects, learns and checkpoints through it."""

    def __init__(
        self,
        *,
        config: TrainConfig,
        tokenizer,
        setter_prompt: str,
        reward: RewardSolver,
        novelty: Novelty,
        generator: torch.Generator,
        records: RunRecords,
        progress: Progress,
        selfplay: SelfPlay | None = None,
    ):
        self.config, self.tokenizer, self.setter_prompt = config, tokenizer, setter_prompt
        self.reward, self.novelty = reward, novelty
        self.prompt_ids = torch.tensor(tokenizer(setter_prompt)["input_ids"])
        self.generator = generator
        self.records, self.progress = records, progress
        self.selfplay = selfplay

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # every rank samples different puzzles from the same seed
        self.generator.manual_seed(self.config.trainer.seed * 1000 + trainer.global_rank)
        self.records.writes = self.progress.shows = trainer.global_rank == 0
        self.records.settings(run_identity(self.config))  # before Lightning saves hparams.yaml, which it does once
        if self.reward.model is not None:
            self.reward.model.to(trainer.strategy.root_device)
        if self.selfplay is not None:
            self.selfplay.learner.to(trainer.strategy.root_device)

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        # a resume starts from the end of the last iteration its checkpoint finished
        self.records.forget_unfinished(trainer.current_epoch)

    def on_train_epoch_start(self, trainer: L.Trainer, module: SetterPPOModule) -> None:
        reset_peak_rss()
        if module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(module.device)
        clock = _Clock()
        sandbox_before = self.reward.sandbox.busy_seconds
        solver_tokens_before = (self.reward.usage.prompt_tokens, self.reward.usage.completion_tokens)
        rollout, iteration = self.config.rollout, trainer.current_epoch
        with torch.no_grad(), rollout_precision(trainer.precision_plugin):
            streams = rank_share(rollout.n_envs, trainer.global_rank, trainer.world_size)
            self.progress.phase(iteration, f"the Setter samples {streams} streams of {rollout.n_steps} tokens")
            episodes, truncated = generate_episodes(
                module.policy,
                self.tokenizer,
                self.setter_prompt,
                streams,
                rollout.n_steps,
                rollout.temperature,
                self.generator,
            )
            clock.lap("setter_sampling")
            texts = [episode.text for episode in episodes]
            self.progress.phase(iteration, f"the Solver attempts {len(texts)} puzzles, the sandbox judges")
            # a Solver sampling from the frozen weights holds their model: with LoRA, the adapters go off
            with module.frozen_weights() if self.reward.on_frozen_weights else contextlib.nullcontext():
                judged = judge_puzzles(texts, self.reward.solver)
            clock.lap("solver")  # the Solver's sampling and the sandbox
            faulty, (judged, episodes) = judged_by_the_sandbox(judged, episodes)
            if faulty:
                log.warning(
                    "iteration %d: %d puzzle(s) left out of the reward: the sandbox failed to judge them",
                    iteration + 1,
                    len(faulty),
                )
                texts = [episode.text for episode in episodes]
            results = [result for _, result in judged]
            if self.selfplay is None:  # the reward's Solver is the initial one: its D is the initial Solver's
                initial = [None if result is None else result.difficulty for result in results]
            else:
                initial = initial_difficulties(
                    results,
                    self.selfplay.initial_solver,
                    self.config.selfplay.rejudge_share,
                    self.generator,
                    module.frozen_weights,
                )
                self.selfplay.collect([result for result in results if result is not None])
            clock.lap("initial_solver")
            distances = novelty_distances(
                texts,
                self.novelty.archive,
                self.novelty.embedder,
                gather=gather_puzzles if trainer.world_size > 1 else None,
            )
            scored = reward_puzzles(texts, judged, distances, self.novelty.reference_distance, self.config.reward)
            clock.lap("novelty")
            self.progress.phase(iteration, "old log-probs and values")
            first_epoch_minibatches = trainer.datamodule.draw_epoch(
                len(episodes)
            )  # drawn now: the buffer is scored in it
            buffer, metrics = build_buffer(
                module, self.prompt_ids, episodes, scored, self.config, first_epoch_minibatches
            )
            metrics["rollout/judge_faults"] = len(faulty)
            clock.lap("old_logprobs_and_values")
        trainer.datamodule.set_buffer(buffer)
        self.sandbox_before = sandbox_before
        self.clock = clock
        self.counts = {  # this rank's
            "puzzles": len(episodes),
            "action_tokens": int(buffer.mask.sum()),
            "solver_prompt_tokens": self.reward.usage.prompt_tokens - solver_tokens_before[0],
            "solver_completion_tokens": self.reward.usage.completion_tokens - solver_tokens_before[1],
        }
        everyone = from_every_rank(RankRollout(scored, initial, truncated, metrics, clock.total()))
        self.records.rollout(everyone, iteration, len(self.novelty.archive))
        self.progress.rollout([puzzle for rank_rollout in everyone for puzzle in rank_rollout.scored])

    def on_train_batch_end(self, trainer: L.Trainer, module, outputs, batch, batch_index: int) -> None:
        self.progress.phase(
            trainer.current_epoch, f"PPO update, minibatch {batch_index + 1}/{trainer.num_training_batches}"
        )

    def on_train_epoch_end(self, trainer: L.Trainer, module: SetterPPOModule) -> None:
        """The Solver's BC phase when one is due (every rank), then where the iteration's time went."""
        self.clock.lap("ppo_update")
        if self.selfplay is not None and self.selfplay.due(trainer.current_epoch):
            self.progress.phase(trainer.current_epoch, "the Solver learns (a BC phase) and is evaluated")
            phase = self.selfplay.learn(
                module.sum_over_ranks,
                trainer.global_rank,
                trainer.world_size,
                lambda: sampling_context(trainer.precision_plugin),
            )
            self.clock.lap("solver_learning")  # the BC phase and the evaluations
            self.records.phase(phase, trainer.current_epoch)
        self.clock.laps["sandbox"] = self.reward.sandbox.busy_seconds - self.sandbox_before
        record = iteration_record(trainer.current_epoch, self.clock.total(), self.clock.laps, self.counts)
        record["peak_rss_gib"] = peak_rss_gib()  # this rank's process, over this iteration
        if module.device.type == "cuda":  # what this rank's tensors held at most (the caching allocator keeps more)
            record["peak_gpu_gib"] = torch.cuda.max_memory_allocated(module.device) / 2**30
        self.records.iteration(record)
        self.progress.iteration(record)

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """A learning Solver's weights as a model directory, `solver/` in the run's folder (rank 0): what
        `codeplay evaluate --llm` takes. Then the run's summary."""
        self.progress.summary()
        if self.selfplay is not None and trainer.global_rank == 0:
            directory = self.records.run_dir / "solver"
            self.selfplay.learner.exported().save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)

    def state_dict(self) -> dict:
        # every rank's generator in rank order (Lightning calls this on every rank, saves rank 0's dict):
        # each rank resumes its own stream, not rank 0's (the ranks would then sample the same puzzles)
        return {
            "generators": from_every_rank(self.generator.get_state()),
            "archive": self.novelty.archive.state_dict(),
            "records": self.records.state_dict(),
            **({"selfplay": self.selfplay.state_dict()} if self.selfplay is not None else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        if rank() < len(state["generators"]):  # a rank the checkpoint did not have keeps its seed from `setup`
            self.generator.set_state(state["generators"][rank()])
        self.novelty.archive.load_state_dict(state["archive"])
        self.records.load_state_dict(state["records"])
        if (self.selfplay is None) != ("selfplay" not in state):
            raise ValueError("the checkpoint's Solver learned and this run's does not, or the other way round")
        if self.selfplay is not None:
            self.selfplay.load_state_dict(state["selfplay"])


class _Clock:
    """Named laps of wall time since the previous lap."""

    def __init__(self):
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self.last
        self.last = now

    def total(self) -> float:
        return self.last - self.started


@contextlib.contextmanager
def sampling_context(plugin):
    """No gradients, at the rollout's precision: how the Solvers sample."""
    with torch.no_grad(), rollout_precision(plugin):
        yield


def rollout_precision(plugin):
    """The trainer's precision for the rollout's forwards, with autocast's cache of cast weights on.
    Lightning turns it off, which is harmless for a training step, but then each of sampling's
    hundreds of one-token forwards casts every weight again, which halved the Setter's tokens/s. The
    cache is emptied when the context exits, before the weights change."""
    if isinstance(plugin, MixedPrecision):
        dtype = torch.bfloat16 if plugin.precision == "bf16-mixed" else torch.float16
        return torch.autocast(plugin.device, dtype=dtype, cache_enabled=True)
    return plugin.forward_context()
