"""A 2-process CPU DDP training run of the tiny stream model, for tests/integration/test_ddp.py:

    python ddp_script.py OUT ITERATIONS [auto]

trains `configs/smoke.yaml` (tiny overrides) for ITERATIONS iterations under OUT/runs, resuming
the newest checkpoint with `auto`. Lightning's `ddp` strategy re-executes this script (same argv,
LOCAL_RANK=1) as rank 1. At the end of training each rank saves OUT/rank{r}.pt: its archive state,
global_step, every minibatch's size and the module's weights. Rank 0 then waits for rank 1 to exit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: conftest's tiny model and tokenizer

import conftest  # noqa: E402

from codeplay_lightning.config import load_config  # noqa: E402
from codeplay_lightning.train import train  # noqa: E402

CONFIGS = Path(__file__).parents[2] / "configs"
# like test_training.tiny_config, with more minibatches than a rank has puzzles: some minibatches
# are empty on one rank only, which must still step with the other
OVERRIDES = ["trainer.precision=32-true", "model.name=tiny-stream", "rollout.n_envs=2", "rollout.n_steps=40",
             "solver.max_new_tokens=24", "ppo.lr=1e-3", "ppo.n_minibatches=6", "ppo.ppo_epochs=1",
             "sandbox.workers=1", "trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]


class RecordRank(L.Callback):
    """Saves what each rank ended with, and (on rank 0) remembers the rank processes it launched."""

    def __init__(self, out: Path):
        self.out, self.batch_sizes, self.children = out, [], []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.children = list(getattr(trainer.strategy.launcher, "procs", []))  # rank 0 only: rank 1's Popen

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch_sizes.append(len(batch["mask"]))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        torch.save({"archive": trainer.datamodule.archive.state_dict(), "global_step": trainer.global_step,
                    "batch_sizes": self.batch_sizes, "world_size": trainer.world_size,
                    "state_dict": {name: value.detach().clone() for name, value in pl_module.state_dict().items()}},
                   self.out / f"rank{trainer.global_rank}.pt")


def main(out: Path, iterations: int, resume: str | None) -> None:
    tokenizer = conftest.char_tokenizer.__wrapped__()
    config = load_config([CONFIGS / "smoke.yaml"],
                         [f"trainer.run_root={out / 'runs'}", f"trainer.iterations={iterations}", *OVERRIDES])
    record = RecordRank(out)
    train(config, resume=resume, policy=conftest.stream_llama(tokenizer), tokenizer=tokenizer, callbacks=[record])
    for child in record.children:  # the process group itself is destroyed at exit (Lightning's atexit hook)
        child.wait(timeout=120)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
