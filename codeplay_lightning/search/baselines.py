"""Baselines of the paper (§5.1) on the same prompts, tasks and budget of LLM calls as GIF-MCTS.

- WorldCoder (Tang et al. 2024, as re-implemented in the paper): one generate, then each call refines
  a program chosen by Thompson sampling: fix it if buggy, else improve it.
- Plain sampling: B independent generate calls from the root prompt, best score (pass@B).

Both are searches in the sense of `run_searches`: `prompts()`, then `receive(completions)`.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

from codeplay_lightning.search.gif_mcts import SearchResult
from codeplay_lightning.search.tasks import Feedback, Task, extract_code, generated_program


@dataclass
class Candidate:
    """A program with its Beta(alpha, beta) posterior: Beta(1 + C·r, 1 + C·(1 − r)) at first, r its score
    (paper §5.1). Each refinement of it then counts as a trial: alpha grows by one when the refined
    program passes every test, beta otherwise (as in the paper's code; REx, Tang et al. 2024)."""

    program: str
    evaluation: Feedback
    alpha: float
    beta: float


class WorldCoder:
    def __init__(self, task: Task, budget: int = 50, heuristic_weight: float = 5.0, seed: int = 0):
        if budget < 1:
            raise ValueError(f"budget must be at least 1, got {budget}")
        self.task, self.budget = task, budget
        self.heuristic_weight = heuristic_weight  # C = 5, as in the original work (paper §5.1)
        self.rng = random.Random(seed)
        self.candidates: list[Candidate] = []
        self.calls = 0
        self.solved_at: int | None = None
        self.parent: Candidate | None = None  # selected for refinement, waiting for its completion

    @property
    def finished(self) -> bool:
        return self.calls >= self.budget or self.solved_at is not None

    def prompts(self) -> list[str]:
        """The first call generates from the root; every later one fixes or improves a selected program."""
        if self.finished:
            return []
        if not self.candidates:
            return [self.task.generate_prompt(self.task.root_code)]
        if self.parent is None:
            self.parent = self.select()
        parent = self.parent
        if parent.evaluation.buggy:
            return [self.task.fix_prompt(parent.program, parent.evaluation.error)]
        return [self.task.improve_prompt(parent.program, parent.evaluation.failing_example or "")]

    def receive(self, completions: list[str]) -> Candidate:
        (completion,) = completions
        self.calls += 1
        if not self.candidates:
            return self.add(generated_program(self.task.root_code, completion))
        parent, self.parent = self.parent, None
        child = self.add(extract_code(completion))
        solved = child.evaluation.score >= 1.0
        parent.alpha, parent.beta = parent.alpha + solved, parent.beta + (not solved)
        return child

    def add(self, program: str) -> Candidate:
        evaluation = self.task.evaluate(program)
        r, c = evaluation.score, self.heuristic_weight
        candidate = Candidate(program, evaluation, alpha=1 + c * r, beta=1 + c * (1 - r))
        self.candidates.append(candidate)
        if r >= 1.0 and self.solved_at is None:
            self.solved_at = self.calls
        return candidate

    def select(self) -> Candidate:
        """Thompson sampling: one draw from every posterior, the highest wins."""
        draws = [self.rng.betavariate(candidate.alpha, candidate.beta) for candidate in self.candidates]
        return self.candidates[max(range(len(draws)), key=draws.__getitem__)]

    def result(self) -> SearchResult:
        best = max(self.candidates, key=lambda candidate: candidate.evaluation.score)
        return SearchResult(best.program, best.evaluation.score, self.calls, self.solved_at)

    def to_json(self) -> str:
        return json.dumps(
            {
                "method": "worldcoder",
                "calls": self.calls,
                "solved_at": self.solved_at,
                "candidates": [asdict(candidate) for candidate in self.candidates],
            }
        )


class PlainSampling:
    """pass@B: B independent generate calls from the root prompt, asked for in one batch."""

    def __init__(self, task: Task, budget: int):
        if budget < 1:
            raise ValueError(f"budget must be at least 1, got {budget}")
        self.task, self.budget = task, budget
        self.programs: list[str] = []
        self.evaluations: list[Feedback] = []

    @property
    def calls(self) -> int:
        return len(self.programs)

    @property
    def finished(self) -> bool:
        return self.calls > 0

    def prompts(self) -> list[str]:
        return [] if self.finished else [self.task.generate_prompt(self.task.root_code)] * self.budget

    def receive(self, completions: list[str]) -> None:
        self.programs = [generated_program(self.task.root_code, completion) for completion in completions]
        self.evaluations = [self.task.evaluate(program) for program in self.programs]

    def result(self) -> SearchResult:
        """The best sample; `solved_at` counts the samples up to the first that scores 1, as if drawn in turn."""
        scores = [evaluation.score for evaluation in self.evaluations]
        best = max(range(len(scores)), key=scores.__getitem__)
        solved_at = next((index + 1 for index, score in enumerate(scores) if score >= 1.0), None)
        return SearchResult(self.programs[best], scores[best], self.calls, solved_at)

    def to_json(self) -> str:
        return json.dumps(
            {
                "method": "sample",
                "calls": self.calls,
                "samples": [
                    {"program": program, **asdict(evaluation)}
                    for program, evaluation in zip(self.programs, self.evaluations)
                ],
            }
        )
