"""`sweep(presets, run_root, out)`: train the paper's presets one after another, then `compare` them.

Each preset trains at the CPU scale (`configs/<preset>.yaml`: the schema's defaults) into
`<run_root>/<preset>/version_0`, in a fresh process. Run it again after an interruption and it
continues: a finished run (its `last.ckpt` epoch reached `trainer.iterations`) is skipped, a half
run resumes from its checkpoint, a directory without checkpoint or puzzles is started afresh; one
with puzzles but no checkpoint is an error, never silently mixed with a new run.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from codeplay_lightning.config import load_config
from codeplay_lightning.experiments.compare import compare

PRESETS = ["none", "difficulty", "novelty", "balanced", "novelty_biased", "product"]  # the paper's figure 2
VERSION = "version_0"

log = logging.getLogger("codeplay_lightning")

# (config file, `key=value` overrides, checkpoint to resume or None) -> trains; raises on failure
Trainer = Callable[[Path, list[str], Path | None], None]


@dataclass
class Step:
    preset: str
    config_file: Path
    run_dir: Path
    action: str  # "skip" (finished), "resume" or "start"
    checkpoint: Path | None = None


def train_in_subprocess(config_file: Path, overrides: list[str], resume: Path | None) -> None:
    """`codeplay train` in a fresh Python process: no model, sandbox or RNG state leaks between presets."""
    command = [sys.executable, "-m", "codeplay_lightning.cli", "train", str(config_file), *overrides]
    if resume is not None:
        command += ["--resume", str(resume)]
    completed = subprocess.run(command, check=False)
    if completed.returncode != 0:
        raise ValueError(
            f"`{' '.join(command[2:])}` failed (exit {completed.returncode}); "
            "run the sweep again to resume from the last finished iteration"
        )


def sweep(
    presets: list[str],
    run_root: Path,
    out: Path,
    seed: int = 0,
    iterations: int | None = None,
    configs: Path = Path("configs"),
    trainer: Trainer = train_in_subprocess,
) -> dict:
    """Train every preset that is not finished, in order, for `iterations` each (None: the preset's own), then
    compare them all into `out`."""
    overrides = [f"trainer.run_root={run_root}", f"trainer.seed={seed}"]
    overrides += [f"trainer.iterations={iterations}"] if iterations is not None else []
    steps = [plan(preset, configs, overrides) for preset in presets]  # every error before any training
    for number, step in enumerate(steps, 1):
        log.info("[%d/%d] %s: %s %s", number, len(steps), step.preset, step.action, step.run_dir)
        if step.action == "start" and step.run_dir.exists():
            shutil.rmtree(step.run_dir)  # nothing in it: no checkpoint and no puzzles (checked by `plan`)
        if step.action != "skip":
            # the preset's own name: its folder is the sweep's, not named by the sweep's overrides
            name = step.run_dir.parent.relative_to(run_root)
            trainer(step.config_file, [*overrides, f"name={name}"], step.checkpoint)
        if plan(step.preset, configs, overrides).action != "skip":
            raise ValueError(f"{step.preset} stopped before its last iteration; run the sweep again to resume it")
    return {"steps": steps, "comparison": compare([step.run_dir for step in steps], out, seed=seed)}


def plan(preset: str, configs: Path, overrides: list[str]) -> Step:
    """What to do for one preset, from what its run directory holds."""
    config_file = configs / f"{preset}.yaml"
    config = load_config([config_file], overrides)
    run_dir = Path(config.trainer.run_root) / config.name / VERSION
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    if checkpoint.is_file():
        done = completed_iterations(checkpoint)
        action = "skip" if done >= config.trainer.iterations else "resume"
        return Step(preset, config_file, run_dir, action, checkpoint if action == "resume" else None)
    puzzles = run_dir / "puzzles.jsonl"
    if puzzles.is_file() and puzzles.stat().st_size:
        raise ValueError(f"{run_dir} has puzzles but no checkpoint to resume from: move it away, then sweep again")
    others = sorted(path.name for path in run_dir.parent.glob("version_*") if path != run_dir)
    if others:  # a fresh TensorBoardLogger version would be the next number, not version_0
        raise ValueError(f"{run_dir.parent} already holds {', '.join(others)}: give the sweep another --run-root")
    return Step(preset, config_file, run_dir, "start")


def completed_iterations(checkpoint: Path) -> int:
    """The PPO iterations finished when `last.ckpt` was saved: the fit loop's processed epochs (its
    `epoch` field lags by one in a checkpoint written at an iteration's end)."""
    import torch

    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
        return int(state["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except Exception as error:  # noqa: BLE001 - any way of being unreadable
        raise ValueError(
            f"checkpoint {checkpoint} is unreadable ({type(error).__name__}): move its run away, then sweep again"
        ) from None
