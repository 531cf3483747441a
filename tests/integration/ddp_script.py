"""A 2-process CPU DDP training run of the tiny stream model, for tests/integration/test_ddp.py:

    python ddp_script.py OUT ITERATIONS [auto]

trains `configs/smoke.yaml` (tiny overrides) for ITERATIONS iterations under OUT/runs, resuming
the newest checkpoint there with `auto`. Lightning's `ddp` strategy re-executes this script (same
argv, LOCAL_RANK=1) as rank 1. At the end of training each rank saves OUT/rank{r}.pt: its archive,
global_step, buffer and minibatch sizes, the module's weights and its pid. Rank 0 then waits for
rank 1 to exit, so that when the command returns both ranks (and their sandboxes) are gone.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the tiny model and tokenizer

from support import CONFIGS, build_char_tokenizer, stream_llama  # noqa: E402

from codeplay_lightning.config import load_config  # noqa: E402
from codeplay_lightning.train import train  # noqa: E402

HANG_SECONDS = 240  # a run takes ~20 s; the test's own timeout is longer
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


class RecordRank(L.Callback):
    """Saves what this rank ended with; on rank 0, keeps the rank processes Lightning launched."""

    def __init__(self, out: Path):
        self.out, self.buffer_sizes, self.batch_sizes, self.children = out, [], [], []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.children = list(getattr(trainer.strategy.launcher, "procs", []))  # rank 0: rank 1's Popen

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.buffer_sizes.append(len(trainer.datamodule.buffer))  # after the rollout callback filled it

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch_sizes.append(len(batch["mask"]))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        ppo = trainer.datamodule.ppo
        torch.save(
            {
                "pid": os.getpid(),
                "world_size": trainer.world_size,
                "global_step": trainer.global_step,
                "steps_per_iteration": ppo.ppo_epochs * ppo.n_minibatches,
                "archive": trainer.datamodule.archive.state_dict(),
                "buffer_sizes": self.buffer_sizes,
                "batch_sizes": self.batch_sizes,
                "state_dict": {name: value.detach().clone() for name, value in pl_module.state_dict().items()},
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )


def main(out: Path, iterations: int, resume: str | None) -> None:
    # a hung collective blocks the main thread in C++, where SIGTERM is never handled: print every
    # thread's stack and exit instead, so that the test's log shows where it hung
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    tokenizer = build_char_tokenizer()
    config = load_config(
        [CONFIGS / "smoke.yaml"], [f"trainer.run_root={out / 'runs'}", f"trainer.iterations={iterations}", *OVERRIDES]
    )
    record = RecordRank(out)
    train(config, resume=resume, policy=stream_llama(tokenizer), tokenizer=tokenizer, callbacks=[record])
    for child in record.children:  # the process group is destroyed at exit by Lightning's atexit hook
        child.wait(timeout=HANG_SECONDS)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
