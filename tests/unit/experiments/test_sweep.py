"""`sweep`'s skip / resume / restart decisions, with a fake trainer that writes what a run writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support import CONFIGS

from codeplay_lightning.cli import main
from codeplay_lightning.config import load_config, to_yaml
from codeplay_lightning.experiments import sweep as sweep_module
from codeplay_lightning.experiments.sweep import completed_iterations, sweep

PER_ITERATION = 3  # puzzles the fake logs per iteration
ITERATIONS = load_config([CONFIGS / "balanced.yaml"]).trainer.iterations  # of every preset: the schema's default


class FakeTrainer:
    """Logs PER_ITERATION puzzles and saves last.ckpt per iteration, as `codeplay train`; stops after
    `stop_after[preset]` iterations (`crash`: raising, as a killed process, else returning)."""

    def __init__(self, stop_after: dict[str, int] | None = None, crash: bool = True):
        self.stop_after, self.crash = stop_after or {}, crash
        self.calls: list[tuple[str, Path | None]] = []

    def __call__(self, config_file: Path, overrides: list[str], resume: Path | None) -> None:
        config = load_config([config_file], overrides)
        self.calls.append((config.name, resume))
        run_dir = Path(config.trainer.run_root) / config.name / "version_0"
        if resume is None:
            assert not run_dir.parent.exists() or not any(run_dir.parent.iterdir()), "the logger would pick version_1"
        start = completed_iterations(resume) if resume else 0
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(to_yaml(config))
        for iteration in range(start, config.trainer.iterations):
            if iteration == self.stop_after.get(config.name):
                if self.crash:
                    raise ValueError(f"{config.name} killed")
                return
            with (run_dir / "puzzles.jsonl").open("a") as handle:
                for k in range(PER_ITERATION):
                    index = iteration * PER_ITERATION + k + 1
                    handle.write(
                        json.dumps(
                            {
                                "iteration": iteration,
                                "index": index,
                                "puzzle": f"p{index}",
                                "valid": True,
                                "reason": "",
                                "D": 1.0,
                                "R_d": 0.0,
                                "R_n": 0.5,
                                "R": 0.5,
                            }
                        )
                        + "\n"
                    )
            finished = {"fit_loop": {"epoch_progress": {"current": {"processed": iteration + 1}}}}
            torch.save({"epoch": iteration, "loops": finished}, run_dir / "checkpoints" / "last.ckpt")


def run_sweep(tmp_path: Path, trainer: FakeTrainer, presets=("none", "product")) -> dict:
    return sweep(list(presets), tmp_path / "runs", tmp_path / "results", seed=5, configs=CONFIGS, trainer=trainer)


def puzzle_indices(run_dir: Path) -> list[int]:
    return [json.loads(line)["index"] for line in (run_dir / "puzzles.jsonl").read_text().splitlines()]


def test_a_fresh_sweep_trains_every_preset_then_compares(tmp_path):
    trainer = FakeTrainer()
    result = run_sweep(tmp_path, trainer)
    assert trainer.calls == [("none", None), ("product", None)]
    assert [step.action for step in result["steps"]] == ["start", "start"]
    assert [run["label"] for run in result["comparison"]["runs"]] == ["none (w_d=0, w_n=0)", "product (R_d·R_n)"]
    assert all(run["puzzles"] == ITERATIONS * PER_ITERATION for run in result["comparison"]["runs"])
    assert (tmp_path / "results" / "figure.png").is_file() and (tmp_path / "results" / "report.md").is_file()
    assert "seed: 5" in (tmp_path / "runs" / "product" / "version_0" / "config.yaml").read_text()


def test_a_sweep_of_more_iterations_trains_on_the_finished_runs(tmp_path):
    run_sweep(tmp_path, FakeTrainer())
    trainer = FakeTrainer()
    longer = ITERATIONS + 2
    result = sweep(
        ["none"], tmp_path / "runs", tmp_path / "results", seed=5, iterations=longer, configs=CONFIGS, trainer=trainer
    )
    run_dir = tmp_path / "runs" / "none" / "version_0"
    assert trainer.calls == [("none", run_dir / "checkpoints" / "last.ckpt")]
    assert puzzle_indices(run_dir) == list(range(1, longer * PER_ITERATION + 1))
    assert result["comparison"]["runs"][0]["puzzles"] == longer * PER_ITERATION


def test_a_finished_sweep_is_not_redone(tmp_path):
    run_sweep(tmp_path, FakeTrainer())
    trainer = FakeTrainer()
    result = run_sweep(tmp_path, trainer)
    assert trainer.calls == []
    assert [step.action for step in result["steps"]] == ["skip", "skip"]


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    presets = ("none", "difficulty", "product")
    with pytest.raises(ValueError, match="difficulty killed"):
        run_sweep(tmp_path, FakeTrainer(stop_after={"difficulty": 3}), presets)
    assert not (tmp_path / "runs" / "product").exists()
    trainer = FakeTrainer()
    result = run_sweep(tmp_path, trainer, presets)
    checkpoint = tmp_path / "runs" / "difficulty" / "version_0" / "checkpoints" / "last.ckpt"
    assert trainer.calls == [("difficulty", checkpoint), ("product", None)]
    assert [step.action for step in result["steps"]] == ["skip", "resume", "start"]
    assert puzzle_indices(checkpoint.parents[1]) == list(range(1, ITERATIONS * PER_ITERATION + 1))


def test_a_run_that_returns_unfinished_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="none stopped before its last iteration"):
        run_sweep(tmp_path, FakeTrainer(stop_after={"none": 2}, crash=False))


def test_a_directory_without_checkpoint_or_puzzles_is_restarted_in_place(tmp_path):
    run_dir = tmp_path / "runs" / "none" / "version_0"
    run_dir.mkdir(parents=True)
    (run_dir / "puzzles.jsonl").write_text("")
    (run_dir / "config.yaml").write_text("stale")
    trainer = FakeTrainer()
    run_sweep(tmp_path, trainer, ["none"])
    assert trainer.calls == [("none", None)]
    assert puzzle_indices(run_dir) == list(range(1, ITERATIONS * PER_ITERATION + 1))


def test_puzzles_without_checkpoint_stop_the_sweep_before_any_training(tmp_path):
    run_dir = tmp_path / "runs" / "product" / "version_0"
    run_dir.mkdir(parents=True)
    (run_dir / "puzzles.jsonl").write_text('{"index": 1}\n')
    trainer = FakeTrainer()
    with pytest.raises(ValueError, match="version_0 has puzzles but no checkpoint"):
        run_sweep(tmp_path, trainer)
    assert trainer.calls == []
    assert (run_dir / "puzzles.jsonl").read_text() == '{"index": 1}\n'


def test_other_versions_without_version_0_are_an_error(tmp_path):
    (tmp_path / "runs" / "none" / "version_1").mkdir(parents=True)
    with pytest.raises(ValueError, match="already holds version_1"):
        run_sweep(tmp_path, FakeTrainer())


def test_an_unreadable_checkpoint_is_an_error(tmp_path):
    checkpoint = tmp_path / "runs" / "none" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="last.ckpt is unreadable"):
        run_sweep(tmp_path, FakeTrainer())


def test_the_subprocess_trainer_passes_overrides_and_resume(monkeypatch, tmp_path):
    commands = []

    class Completed:
        returncode = 1

    monkeypatch.setattr(sweep_module.subprocess, "run", lambda command, check: commands.append(command) or Completed)
    with pytest.raises(ValueError, match=r"failed \(exit 1\); run the sweep again"):
        sweep_module.train_in_subprocess(Path("configs/none.yaml"), ["trainer.seed=5"], Path("x/last.ckpt"))
    assert commands[0][1:] == [
        "-m",
        "codeplay_lightning.cli",
        "train",
        "configs/none.yaml",
        "trainer.seed=5",
        "--resume",
        "x/last.ckpt",
    ]


def test_cli_sweep_with_an_unknown_preset_is_one_line(tmp_path, capsys):
    assert main(["sweep", "--presets", "none,nonsense", "--run-root", str(tmp_path / "runs")]) == 2
    error = capsys.readouterr().err.strip()
    assert "nonsense.yaml does not exist" in error and "\n" not in error
    assert not (tmp_path / "runs").exists()
