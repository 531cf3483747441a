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
import threading
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


HEARTBEAT_SECONDS = 60.0  # written to a file or a pipe, the longest a run stays silent


class Progress:
    """The run's console: in a terminal, the phase under way on one live line; elsewhere (a file, a scheduler's log)
    a line naming it whenever a minute has passed without one. Then a line per iteration and a summary."""

    def __init__(self, iterations: int, stream=sys.stderr):
        self.iterations, self.stream = iterations, stream
        self.shows = True  # set per rank by the callback's setup
        self.started = self.spoke = time.perf_counter()
        self.finished: list[dict] = []  # this session's iterations: counts and rewards
        self.scored: list[ScoredPuzzle] = []
        self.under_way = ""
        self.stopped = threading.Event()
        self.heartbeat: threading.Thread | None = None

    def phase(self, iteration: int, text: str) -> None:
        """`text` as the phase under way in `iteration` (0-based)."""
        if not self.shows:
            return
        self.under_way = f"iteration {iteration + 1}/{self.iterations}: {text}"
        if self.stream.isatty():
            self.stream.write(f"\r\x1b[K{self.under_way}")
            self.stream.flush()
        elif self.heartbeat is None:
            self.heartbeat = threading.Thread(target=self._beat, name="progress heartbeat", daemon=True)
            self.heartbeat.start()

    def _beat(self) -> None:
        while not self.stopped.wait(1.0):
            if time.perf_counter() - self.spoke >= HEARTBEAT_SECONDS:
                self.spoke = time.perf_counter()
                log.info("%s (%.1f min into the run)", self.under_way, (self.spoke - self.started) / 60)

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
        self.spoke = time.perf_counter()
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
        self.stopped.set()
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
