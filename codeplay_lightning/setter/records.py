"""`RunRecords`: what a training run writes as it goes, in its run directory, rank 0 for every rank.

- `puzzles.jsonl`: every puzzle, in the order sampled: its iteration, index, text, validity, D (and the initial
  Solver's D where self-play re-judged it), R_d, R_n and R;
- `iterations.jsonl`: where each iteration's time went, the work done and the peak memory;
- `solver.jsonl`: each BC phase of a learning Solver, with the evaluations after it;
- `eval.jsonl`: each evaluation of the Setter's policy (`evaluation.every`), its puzzles and their verdicts;
- TensorBoard: `reward_by_puzzle/*` against puzzles generated (raw and smoothed over the last 200 puzzles, the paper's
  curves, and each puzzle's iteration); `rollout/*`, `ppo/*`, `solver/*`, `eval/*`, `time/*` and `memory/*` against
  iterations, 1 to N, as users count them (the initial Solver's evaluations at 0); the last puzzles as text; the
  run's settings in the HPARAMS tab against its last iteration's `HPARAMS_METRICS`.

The rollout callback hands the records over; this module only writes them.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from torch.utils.tensorboard.summary import hparams

from codeplay_lightning.config import TrainConfig, run_identity
from codeplay_lightning.setter.progress import LAPS, iteration_counts
from codeplay_lightning.setter.rollout import ScoredPuzzle
from codeplay_lightning.setter.selfplay import mean_pass_rate

SMOOTHING = 200  # puzzles, as the paper's curves
# the per-iteration tags HPARAMS tabulates the runs by (their last value)
HPARAMS_METRICS = ("rollout/valid_frac", "rollout/solved_frac", "rollout/R_d", "rollout/R_n", "rollout/R")


@dataclass(frozen=True)
class RankRollout:
    """What one rank's rollout gives the iteration's records."""

    scored: list[ScoredPuzzle]
    initial: list[float | None]  # the initial Solver's D per puzzle (`initial_difficulties`)
    truncated: int  # puzzles still open when their stream ran out of steps
    metrics: dict[str, float]  # `build_buffer`'s
    seconds: float  # the rollout's wall time


class RunRecords:
    """The run's records through `loggers`: the first is TensorBoard's (the run's directory, its writer for the
    puzzle-indexed tags and texts); each gets the settings and the per-iteration metrics. Every rank counts the
    puzzles (`puzzles_generated`, over all ranks, which a checkpoint keeps); rank 0 (`writes`) writes."""

    def __init__(self, loggers: Sequence[Logger]):
        self.logger: TensorBoardLogger = loggers[0]
        self.loggers = loggers
        self.writes = True  # set per rank by the callback's setup
        self.puzzles_generated = 0
        self.recent = {name: deque(maxlen=SMOOTHING) for name in ("difficulty", "novelty", "total")}

    @property
    def run_dir(self) -> Path:
        return Path(self.logger.log_dir)

    def forget_unfinished(self, iteration: int) -> None:
        """On resuming after a crash, drops the records of the iteration that did not finish (`iteration`, the
        first one the checkpoint has not): it is sampled again."""
        if not self.writes:
            return
        _keep_records(self.run_dir / "puzzles.jsonl", lambda record: record["index"] <= self.puzzles_generated)
        for name in ("iterations.jsonl", "solver.jsonl", "eval.jsonl"):
            _keep_records(self.run_dir / name, lambda record: record["iteration"] < iteration)

    def settings(self, identity: dict[str, object]) -> None:
        """The run's settings (`config.run_identity`) to hparams.yaml and TensorBoard's HPARAMS tab, where runs are
        filtered and tabulated by them against `HPARAMS_METRICS`. The settings the run changed from the schema's
        defaults come first (the tab shows its first columns ticked): what tells the runs apart, not the model's
        settings that every preset shares."""
        if not self.writes:
            return
        defaults = run_identity(TrainConfig())
        changed_first = {key: value for key, value in identity.items() if defaults.get(key) != value} | identity
        params = {
            key: value if isinstance(value, int | float | str) else str(value) for key, value in changed_first.items()
        }
        for logger in self.loggers:
            logger.log_hyperparams(params)
        for summary in hparams(params, dict.fromkeys(HPARAMS_METRICS, 0.0)):  # the metrics' names only
            self.logger.experiment.file_writer.add_summary(summary)

    def rollout(self, everyone: list[RankRollout], iteration: int, archive_size: int) -> None:
        """Every rank's rollout (in rank order): each puzzle to puzzles.jsonl and `reward_by_puzzle/*`; the iteration's
        counts, rewards, pass rates and `build_buffer`'s metrics (their mean over the ranks) to `rollout/*`, `ppo/*`
        and `solver/*`."""
        scored = [puzzle for rollout in everyone for puzzle in rollout.scored]
        if not self.writes:
            self.puzzles_generated += len(scored)
            return
        initial = [difficulty for rollout in everyone for difficulty in rollout.initial]
        writer = self.logger.experiment
        with (self.run_dir / "puzzles.jsonl").open("a") as handle:
            for puzzle, initial_difficulty in zip(scored, initial, strict=True):
                self.puzzles_generated += 1
                for name, value in (
                    ("difficulty", puzzle.r_difficulty),
                    ("novelty", puzzle.r_novelty),
                    ("total", puzzle.reward),
                ):
                    self.recent[name].append(value)
                    writer.add_scalar(f"reward_by_puzzle/{name}", value, self.puzzles_generated)
                    writer.add_scalar(
                        f"reward_by_puzzle/{name}_smoothed", float(np.mean(self.recent[name])), self.puzzles_generated
                    )
                # the iteration on this axis too: a puzzle-indexed curve reads against the per-iteration ones
                writer.add_scalar("reward_by_puzzle/iteration", iteration + 1, self.puzzles_generated)
                record = puzzle_record(puzzle, initial_difficulty, iteration=iteration, index=self.puzzles_generated)
                handle.write(json.dumps(record) + "\n")
        counts, share = iteration_counts(scored), max(len(scored), 1)
        both = [(p.difficulty, d) for p, d in zip(scored, initial) if d is not None]
        self._log_metrics(
            {
                "rollout/puzzles": len(scored),
                "rollout/valid_frac": counts["valid"] / share,
                "rollout/solved_frac": counts["solved"] / share,
                "rollout/truncated": sum(rollout.truncated for rollout in everyone),
                "rollout/puzzles_per_s": len(scored) / max(max(rollout.seconds for rollout in everyone), 1e-9),
                "rollout/archive_size": archive_size,
                **{f"rollout/{key}": counts[key] for key in ("R_d", "R_n", "R")},  # the iteration's means
                # 1/D of the same puzzles for the Solver rewarding them and the initial one (docs/selfplay.md)
                "solver/pass_rate_current": mean_pass_rate([current for current, _ in both]),
                "solver/pass_rate_initial": mean_pass_rate([initial for _, initial in both]),
                **{
                    name: float(np.mean([rollout.metrics[name] for rollout in everyone]))
                    for name in everyone[0].metrics
                },
            },
            step=iteration + 1,
        )
        recent = "\n\n".join(
            f"R={p.reward:.2f} R_d={p.r_difficulty:.2f} R_n={p.r_novelty:.2f}\n\n    " + p.text.replace("\n", "\n    ")
            for p in scored[-5:]
        )
        writer.add_text("puzzles/recent", recent, iteration + 1)

    def iteration(self, record: dict) -> None:
        """An `iteration_record` to iterations.jsonl, its time and memory to `time/*` and `memory/*`."""
        if not self.writes:
            return
        with (self.run_dir / "iterations.jsonl").open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        self._log_metrics(
            {
                "time/iteration_s": record["seconds"],
                "time/outside_models_frac": record["outside_models_frac"],
                "memory/peak_rss_gib": record["peak_rss_gib"],
                **({"memory/peak_gpu_gib": record["peak_gpu_gib"]} if "peak_gpu_gib" in record else {}),
            },
            step=record["iteration"] + 1,
        )

    def phase(self, phase: dict, iteration: int) -> None:
        """A BC phase's record (`SelfPlay.learn`'s) to solver.jsonl; its loss and pass rates to `solver/*`, the
        initial Solver's (measured before the first phase) at step 0 of the same curves."""
        if not self.writes:
            return
        with (self.run_dir / "solver.jsonl").open("a") as handle:
            handle.write(json.dumps({"iteration": iteration, **phase}) + "\n")
        if "initial" in phase:
            self._log_metrics(_pass_metrics(phase["initial"]), step=0)
        bc = {f"solver/bc_{key}": value for key, value in phase["bc"].items()}
        self._log_metrics(bc | _pass_metrics(phase["learned"]), step=iteration + 1)

    def evaluation(self, record: dict) -> None:
        """An evaluation of the Setter (`SetterEvaluation`'s) to eval.jsonl, its shares and R_n to `eval/*`."""
        if not self.writes:
            return
        with (self.run_dir / "eval.jsonl").open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        metrics = {f"eval/{key}": value for key, value in record["summary"].items() if key != "puzzles"}
        self._log_metrics(metrics, step=record["iteration"] + 1)

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)

    def state_dict(self) -> dict:
        return {"puzzles_generated": self.puzzles_generated, "recent": {k: list(v) for k, v in self.recent.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.puzzles_generated = state["puzzles_generated"]
        for name, values in state["recent"].items():
            self.recent[name].extend(values)


def json_difficulty(difficulty: float | None) -> float | None:
    """D as the records hold it: None when unsolved (infinite: JSON has no infinity) or never attempted (None)."""
    return None if difficulty is None or np.isinf(difficulty) else difficulty


def puzzle_record(puzzle: ScoredPuzzle, initial: float | None, *, iteration: int, index: int) -> dict:
    """One line of puzzles.jsonl. D is None when unsolved (JSON has no infinity); `initial` is the initial
    Solver's D, None where it made no attempt."""
    return {
        "iteration": iteration,
        "index": index,
        "puzzle": puzzle.text,
        "valid": puzzle.valid,
        "reason": puzzle.reason,
        "D": json_difficulty(puzzle.difficulty),
        "initial_attempted": initial is not None,  # D_initial is None when unsolved
        "D_initial": json_difficulty(initial),
        "R_d": puzzle.r_difficulty,
        "R_n": puzzle.r_novelty,
        "R": puzzle.reward,
    }


def iteration_record(iteration: int, seconds: float, laps: dict[str, float], counts: dict[str, int]) -> dict:
    """One line of iterations.jsonl: the iteration's wall time, `counts` (puzzles, tokens), each lap's seconds and
    the share of the time spent outside the models: the Solver's sampling counts as a model's, the sandbox's
    runs of its programs do not."""
    model = sum(laps.get(name, 0.0) for name in MODEL_LAPS) - laps["sandbox"]
    return {
        "iteration": iteration,
        "seconds": seconds,
        **counts,
        **{f"{name}_seconds": value for name, value in laps.items()},
        "outside_models_frac": 1 - model / seconds,
    }


MODEL_LAPS = tuple(name for name, model, _ in LAPS if model)


def _pass_metrics(summaries: dict[str, dict]) -> dict[str, float]:
    """`solver/<set>_pass@k` of each evaluation set's summary."""
    return {
        f"solver/{name}_{key}": value
        for name, summary in summaries.items()
        for key, value in summary.items()
        if key.startswith("pass@")
    }


def _keep_records(path: Path, keep) -> None:
    """Rewrites the JSON-lines file `path` (if any) with only the records `keep` accepts."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if keep(json.loads(line))]
    if len(kept) < len(lines):
        partial = path.with_suffix(".partial")
        partial.write_text("".join(kept))
        partial.replace(path)
