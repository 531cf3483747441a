"""Tiny training runs for the integration tests: the smoke preset on a model built in code, and what they write."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import lightning as L
import torch
from support import CONFIGS, ScriptedLLM

from codeplay_lightning.config import load_config
from codeplay_lightning.experiments.sweep import completed_iterations
from codeplay_lightning.models import SamplingConfig
from codeplay_lightning.train import train


def tiny_config(run_root: Path, *overrides: str):
    return load_config(
        [CONFIGS / "smoke.yaml"],
        [
            f"trainer.run_root={run_root}",
            "trainer.precision=32-true",
            "model.name=tiny-stream",
            "rollout.n_envs=3",
            "rollout.n_steps=48",
            "solver.max_new_tokens=24",
            "ppo.lr=1e-3",
            "ppo.n_minibatches=2",
            "ppo.ppo_epochs=2",
            *overrides,
        ],
    )


def run(tmp_path, stream_model, tokenizer, *overrides, resume=None, callbacks=()) -> Path:
    return train(
        tiny_config(tmp_path, *overrides),
        resume=resume,
        policy=copy.deepcopy(stream_model),
        tokenizer=tokenizer,
        callbacks=callbacks,
    )


def read_records(run_dir: Path, name: str = "puzzles.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def read_puzzles(run_dir: Path) -> list[dict]:
    return read_records(run_dir)


def load_checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def finished_iterations(run_dir: Path) -> int:
    return completed_iterations(run_dir / "checkpoints" / "last.ckpt")


class KilledAt(L.Callback):
    """Kills the run as its `iteration` begins, as a crash would."""

    def __init__(self, iteration: int):
        self.iteration = iteration

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.current_epoch == self.iteration:
            raise RuntimeError("killed")


class CoinLLM(ScriptedLLM):
    """Stands in for the Solver's HFLLM: answers 7 or -12 at random, drawn from the generator it is
    given, so the puzzles' D values follow that generator's stream."""

    def __init__(self, model, tokenizer, sampling: SamplingConfig, *, chat: bool, batch_size: int, generator):
        super().__init__(self.toss)
        self.generator = generator

    def toss(self, prompt: str) -> str:
        return "\n    return 7" if torch.randint(0, 2, (1,), generator=self.generator).item() else "\n    return -12"
