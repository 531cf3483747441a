"""Baselines of the paper (§5.1) on the same prompts, tasks and budget of LLM calls as GIF-MCTS.

- WorldCoder (Tang et al. 2024, as re-implemented in the paper): one generate, then each call refines
  a program chosen by Thompson sampling: fix it if buggy, else improve it.
- Plain sampling: B independent generate calls from the root prompt, best score (pass@B).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from codeplay_lightning.search.gif_mcts import SearchResult
from codeplay_lightning.search.llm import LLM
from codeplay_lightning.search.tasks import Evaluation, Task, continuation, extract_code


@dataclass
class Candidate:
    """A program with its Beta(alpha, beta) posterior: alpha = 1 + C·r, beta = 1 + C·(1 − r) + N, where
    r is its score and N the times it was selected (paper §5.1; REx, Tang et al. 2024)."""

    program: str
    evaluation: Evaluation
    alpha: float
    beta: float


class WorldCoder:
    def __init__(self, task: Task, llm: LLM, budget: int = 50, heuristic_weight: float = 5.0, seed: int = 0):
        if budget < 1:
            raise ValueError(f"budget must be at least 1, got {budget}")
        self.task, self.llm, self.budget = task, llm, budget
        self.heuristic_weight = heuristic_weight  # C = 5, as in the original work (paper §5.1)
        self.rng = random.Random(seed)
        self.candidates: list[Candidate] = []
        self.calls = 0

    def add(self, program: str) -> Candidate:
        evaluation = self.task.evaluate(program)
        r, c = evaluation.score, self.heuristic_weight
        candidate = Candidate(program, evaluation, alpha=1 + c * r, beta=1 + c * (1 - r))
        self.candidates.append(candidate)
        return candidate

    def complete(self, prompt: str) -> str:
        self.calls += 1
        return self.llm.complete([prompt])[0]

    def select(self) -> Candidate:
        """Thompson sampling: one draw from every posterior, the highest wins; the winner's beta grows by
        one, since being refined once more without being solved counts as a failure (REx)."""
        draws = [self.rng.betavariate(candidate.alpha, candidate.beta) for candidate in self.candidates]
        chosen = self.candidates[max(range(len(draws)), key=draws.__getitem__)]
        chosen.beta += 1
        return chosen

    def best(self) -> Candidate:
        return max(self.candidates, key=lambda candidate: candidate.evaluation.score)

    def run(self) -> SearchResult:
        root_code = self.task.root_code
        self.add(root_code + continuation(self.complete(self.task.generate_prompt(root_code))))
        while self.calls < self.budget and self.best().evaluation.score < 1.0:
            parent = self.select()
            if parent.evaluation.buggy:
                prompt = self.task.fix_prompt(parent.program, parent.evaluation.error)
            else:
                prompt = self.task.improve_prompt(parent.program, parent.evaluation.failing_example or "")
            self.add(extract_code(self.complete(prompt)))
        best = self.best()
        return SearchResult(best.program, best.evaluation.score, self.calls)


def plain_sampling(task: Task, llm: LLM, budget: int) -> SearchResult:
    """pass@B: B independent generate calls from the root prompt (one batch); the best program."""
    root_code = task.root_code
    completions = llm.complete([task.generate_prompt(root_code)] * budget)
    programs = [root_code + continuation(completion) for completion in completions]
    scores = [task.evaluate(program).score for program in programs]
    best = max(range(budget), key=scores.__getitem__)
    return SearchResult(programs[best], scores[best], budget)
