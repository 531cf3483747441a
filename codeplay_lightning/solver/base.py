"""The interface every Solver strategy offers the rollout (its config, `SolverConfig`, is kept with the other configs
in `codeplay_lightning.config`; the strategies themselves are `strategies.STRATEGIES`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from codeplay_lightning.puzzles import Puzzle


class SolverResult(Protocol):
    """What the rollout reads of the Solver's work on one puzzle."""

    @property
    def puzzle(self) -> Puzzle: ...

    @property
    def passes(self) -> int:
        """Solutions found: passing samples, or 1 for a solved search; 0 when unsolved."""
        ...

    @property
    def difficulty(self) -> float:
        """D in [1, N_a], or math.inf when unsolved."""
        ...

    @property
    def judge_faults(self) -> int:
        """Attempts the sandbox failed to judge (its own fault, `Verdict.judge_fault`): D then says nothing."""
        ...


class Solver(Protocol):
    """What the rollout calls. The LLM and sandbox a Solver works with are its own: the rollout is handed
    those it moves and times."""

    def solve(self, puzzles: Sequence[Puzzle]) -> Sequence[SolverResult]:
        """One result per puzzle, in order."""
        ...
