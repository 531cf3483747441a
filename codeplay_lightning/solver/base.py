"""What every Solver strategy shares: how its LLM samples and the interface the rollout calls (its config,
`SolverConfig`, is kept with the other configs in `codeplay_lightning.config`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from codeplay_lightning.config import SolverConfig
from codeplay_lightning.models.sampling import SamplingConfig
from codeplay_lightning.puzzles import SOLVER_STOP, Puzzle


def solver_sampling(config: SolverConfig) -> SamplingConfig:
    """How the Solver's LLM samples. The few-shot Solver continues `def g():` and stops where the
    few-shot pattern goes on; a search's answers (prose, then a fenced program) run to eos."""
    stop_strings = SOLVER_STOP if config.strategy == "few-shot" else ()
    return SamplingConfig(config.max_new_tokens, config.temperature, config.top_p, stop_strings)


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


class Solver(Protocol):
    """What the rollout calls. The LLM and sandbox a Solver works with are its own: the rollout is handed
    those it moves and times."""

    def solve(self, puzzles: Sequence[Puzzle]) -> Sequence[SolverResult]:
        """One result per puzzle, in order."""
        ...
