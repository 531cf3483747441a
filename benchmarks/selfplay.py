"""What a learning Solver adds to the loop: the initial Solver's re-judge (D_initial) and the BC phase, against the
rest of the iteration, from `configs/selfplay.yaml` run for one BC period (`selfplay.learn_every` iterations) by this
tree in a child process. Goal: together ≤ 30% of an iteration. The held-out evaluations after each phase are a
measurement, not part of learning: they are left out here (`selfplay.eval_heldout=0`) and reported by the run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from benchmarks.loop import run_iteration


def bench_selfplay(config: str = "configs/selfplay.yaml") -> dict:
    from codeplay_lightning.config import load_config
    from codeplay_lightning.devices import resolved_precision

    loaded = load_config([Path(config)])
    overrides = (
        f"trainer.iterations={loaded.selfplay.learn_every}",
        "selfplay.eval_heldout=0",
        f"trainer.precision={resolved_precision(loaded.trainer)}",
    )
    with tempfile.TemporaryDirectory() as scratch:
        runs = Path(scratch)
        run_iteration(Path.cwd(), Path(config), runs, overrides)  # its iterations override the one iteration
        (run_dir,) = runs.glob("**/version_0")
        records = [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]
        (phase,) = [json.loads(line) for line in (run_dir / "solver.jsonl").read_text().splitlines()]
    return {"config": config, "rejudge_share": loaded.selfplay.rejudge_share, **selfplay_costs(records, phase)}


def selfplay_costs(records: list[dict], phase: dict) -> dict:
    """From the iterations.jsonl records of one BC period and its solver.jsonl record: the re-judge's and the BC
    phase's seconds, the rest of the iterations' (the evaluations left out too), and their ratio."""
    seconds = sum(record["seconds"] for record in records)
    rejudge = sum(record["initial_solver_seconds"] for record in records)
    learning = sum(record.get("solver_learning_seconds", 0.0) for record in records)  # BC and evaluations
    bc = phase["bc"]["seconds"]
    rest = seconds - rejudge - learning
    return {
        "iterations": len(records),
        "seconds": seconds,
        "rejudge_seconds": rejudge,
        "bc_seconds": bc,
        "bc": phase["bc"],
        "rest_seconds": rest,
        "added_over_rest": (rejudge + bc) / rest,
    }
