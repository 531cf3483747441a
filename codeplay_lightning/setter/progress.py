"""`Progress`: what a person watching a training run sees, rank 0 only. In a terminal, the phase under way on one
line that the next overwrites; one plain line per finished iteration, in a terminal or a log file alike:

    iteration 2/10: 43 puzzles, 99% valid, 56% solved; R_d -0.21, R_n 0.24, R 0.03 | 112 s (Setter 11, Solver 45,
    PPO 54) | 6.3 GiB

and a summary when the run ends. The lines go through the `codeplay_lightning` logger (`codeplay train` prints its
INFO lines); the phase line is written to stderr only when it is a terminal.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence

import numpy as np

from codeplay_lightning.setter.rollout import ScoredPuzzle

log = logging.getLogger("codeplay_lightning")

# An iteration's laps, in order (iterations.jsonl has each one's seconds): (name, whether a model computes in it,
# what an iteration's console line calls it, or "" where the line leaves it out). The Solvers' laps hold the
# sandbox's runs of programs, which `iteration_record` counts apart; "solver_learning" only with a learning Solver.
LAPS = (
    ("setter_sampling", True, "Setter"),
    ("solver", True, "Solver"),
    ("initial_solver", True, "initial Solver"),
    ("novelty", False, ""),
    ("old_logprobs_and_values", True, ""),
    ("ppo_update", True, "PPO"),
    ("solver_learning", True, "Solver learning"),
)
SHOWN_LAPS = tuple((name, label) for name, _, label in LAPS if label)


class Progress:
    def __init__(self, iterations: int, stream=sys.stderr):
        self.iterations, self.stream = iterations, stream
        self.shows = True  # set per rank by the callback's setup
        self.started = time.perf_counter()
        self.finished: list[dict] = []  # this session's iterations: counts and rewards
        self.scored: list[ScoredPuzzle] = []

    def phase(self, iteration: int, text: str) -> None:
        """`text` as the phase under way in `iteration` (0-based), in a terminal."""
        if self.shows and self.stream.isatty():
            self.stream.write(f"\r\x1b[Kiteration {iteration + 1}/{self.iterations}: {text}")
            self.stream.flush()

    def rollout(self, scored: Sequence[ScoredPuzzle]) -> None:
        """Every rank's puzzles of the iteration under way, for its line."""
        self.scored = list(scored)

    def iteration(self, record: dict) -> None:
        """The finished iteration's line, from its puzzles and its `iteration_record`."""
        if not self.shows:
            return
        counts = iteration_counts(self.scored)
        self.finished.append(counts)
        laps = ", ".join(  # those that took time: no initial Solver's re-judge without self-play
            f"{label} {record[f'{name}_seconds']:.0f}"
            for name, label in SHOWN_LAPS
            if record.get(f"{name}_seconds", 0) >= 0.5
        )
        if self.stream.isatty():
            self.stream.write("\r\x1b[K")
        log.info(
            "iteration %d/%d: %s | %.0f s (%s) | %.1f GiB",
            record["iteration"] + 1,
            self.iterations,
            describe(counts),
            record["seconds"],
            laps,
            record.get("peak_gpu_gib", record["peak_rss_gib"]),
        )

    def summary(self) -> None:
        """How the run ended: what this session trained, in all and in its last iteration."""
        if not self.shows or not self.finished:
            return
        total = {key: sum(counts[key] for counts in self.finished) for key in ("puzzles", "valid", "solved")}
        log.info(
            "trained %d iterations in %.1f min: %d puzzles, %.0f%% valid, %.0f%% solved; the last iteration: %s",
            len(self.finished),
            (time.perf_counter() - self.started) / 60,
            total["puzzles"],
            100 * total["valid"] / max(total["puzzles"], 1),
            100 * total["solved"] / max(total["puzzles"], 1),
            describe(self.finished[-1]),
        )


def iteration_counts(scored: Sequence[ScoredPuzzle]) -> dict:
    """Puzzles, valid and solved ones, and the mean R_d, R_n and R (NaN without puzzles)."""
    return {
        "puzzles": len(scored),
        "valid": sum(puzzle.valid for puzzle in scored),
        "solved": sum(puzzle.passes > 0 for puzzle in scored),
        **{
            name: float(np.mean([getattr(puzzle, field) for puzzle in scored])) if scored else float("nan")
            for name, field in (("R_d", "r_difficulty"), ("R_n", "r_novelty"), ("R", "reward"))
        },
    }


def describe(counts: dict) -> str:
    """'43 puzzles, 99% valid, 56% solved; R_d -0.21, R_n 0.24, R 0.03'."""
    share = max(counts["puzzles"], 1)
    return (
        f"{counts['puzzles']} puzzles, {100 * counts['valid'] / share:.0f}% valid, "
        f"{100 * counts['solved'] / share:.0f}% solved; R_d {counts['R_d']:.2f}, R_n {counts['R_n']:.2f}, "
        f"R {counts['R']:.2f}"
    )
