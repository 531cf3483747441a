"""The search Solver: one GIF-MCTS or WorldCoder search per puzzle, with a budget of N_a LLM calls.

Every iteration's searches run together (`run_searches`), so each round's LLM calls form one batch.
A search stops at its first program that solves the puzzle, so its difficulty is
D = the number of LLM calls it needed to get there (`SearchResult.solved_at`), ∞ when the budget
ran out. For sampling, D = N_a / passes estimates how many samples one solution takes; a search's
calls build on each other and have no pass rate, and its calls-to-solution is its own count of the
same thing, on the same scale 1..N_a for the same budget: R_d's ramp (0 at D = 1, 1 from D = 3)
applies unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from codeplay_lightning.config import SolverConfig
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm import LLM
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.search import P3Task, Search, SearchResult, Task, run_searches


@dataclass(frozen=True)
class SearchPuzzleResult:
    """One search's outcome on one puzzle."""

    puzzle: Puzzle
    search: SearchResult  # best program, its score, LLM calls spent, the call that first solved the puzzle
    judge_faults: int  # the search's programs the sandbox failed to judge

    @property
    def passes(self) -> int:
        """1 when the search solved the puzzle (it stops at its first solution), else 0."""
        return int(self.search.solved_at is not None)

    @property
    def difficulty(self) -> float:
        """D = the LLM calls up to the first solving program; math.inf when the budget ran out."""
        return math.inf if self.search.solved_at is None else float(self.search.solved_at)


class SearchSolver:
    """`search` (a row of `SEARCHES`: GIF-MCTS or WorldCoder) per puzzle on `llm`, each with a budget of
    `config.attempts` calls, judged in `sandbox`. `generator` draws each search's seed (WorldCoder's Thompson
    sampling)."""

    def __init__(
        self,
        llm: LLM,
        sandbox: Sandbox,
        config: SolverConfig,
        generator: torch.Generator,
        search: Callable[[Task, int, int], Search],
    ) -> None:
        self.llm, self.sandbox, self.config, self.generator, self.search = llm, sandbox, config, generator, search

    def solve(self, puzzles: Sequence[Puzzle]) -> list[SearchPuzzleResult]:
        """One result per puzzle, in order."""
        seeds = torch.randint(0, 2**62, (len(puzzles),), generator=self.generator).tolist()
        tasks = [P3Task(puzzle, self.sandbox) for puzzle in puzzles]
        searches = [self.search(task, self.config.attempts, seed) for task, seed in zip(tasks, seeds)]
        return [
            SearchPuzzleResult(task.puzzle, result, task.judge_faults)
            for task, result in zip(tasks, run_searches(searches, self.llm))
        ]
