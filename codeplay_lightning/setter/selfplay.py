"""Self-play's part of an iteration (docs/selfplay.md), which the rollout callback calls between its steps.

- `initial_difficulties`: D of the *initial* Solver for the iteration's valid puzzles (the reward's D is the
  current Solver's), for all of them or a seeded share (`selfplay.rejudge_share`): Codeplay's objective (§4) is
  puzzles ever harder for the initial Solver while the learning one keeps up with them;
- `SelfPlay.collect`: every rank's verified pairs into the replay buffer, in rank order (each once);
- `SelfPlay.learn`: after every `selfplay.learn_every` iterations, a BC phase (`solver.learning`), then pass@1 and
  pass@K on our corpus's held-out families and on `selfplay.eval_file` (the initial Solver's too, once, first).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from codeplay_lightning.config import SelfPlayConfig, SolverConfig
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm import HFLLM
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.rewards import pass_rate
from codeplay_lightning.setter.ranks import from_every_rank
from codeplay_lightning.solver import FewShotSolver, Solver, SolverResult, solver_sampling
from codeplay_lightning.solver.evaluation import solver_summary
from codeplay_lightning.solver.learning import SolverLearner, verified_pairs


def initial_difficulties(
    results: Sequence[SolverResult | None],
    initial_solver: Solver,
    share: float,
    generator: torch.Generator,
    frozen_weights: Callable[[], contextlib.AbstractContextManager],
) -> list[float | None]:
    """Per puzzle, the initial Solver's D (math.inf: unsolved), or None where it made no attempt (an invalid
    puzzle, or one outside the share). `results` are the learning reward Solver's (None for an invalid puzzle); each
    valid puzzle is attempted again by `initial_solver` with probability `share` (one draw from `generator` per valid
    puzzle, so the draw does not depend on the Solvers' samples), under `frozen_weights()` (the LoRA Setter's
    adapters off)."""
    valid = [index for index, result in enumerate(results) if result is not None]
    draws = torch.rand(len(valid), generator=generator).tolist()
    chosen = [index for index, draw in zip(valid, draws) if draw < share]
    difficulties: list[float | None] = [None] * len(results)
    if chosen:
        with frozen_weights():
            again = initial_solver.solve([results[index].puzzle for index in chosen])
        for index, result in zip(chosen, again):
            difficulties[index] = result.difficulty
    return difficulties


def mean_pass_rate(difficulties: Sequence[float | None]) -> float:
    """The mean of 1/D over the puzzles attempted (0 for an unsolved one); NaN when none was."""
    attempted = [difficulty for difficulty in difficulties if difficulty is not None]
    return sum(map(pass_rate, attempted)) / len(attempted) if attempted else math.nan


@dataclass
class SelfPlay:
    """What a run whose Solver learns holds besides the Setter: the learner, the initial Solver, the evaluation
    puzzles (`heldout`: our corpus's held-out families; `eval_file`: `selfplay.eval_file`'s, never trained on),
    and the count of evaluations made (the first is the initial Solver's)."""

    learner: SolverLearner
    initial_solver: Solver
    heldout: list[Puzzle]
    eval_file: list[Puzzle]
    config: SelfPlayConfig
    solver: SolverConfig  # how the learning Solver samples
    sandbox: Sandbox
    seed: int
    evaluations: int = 0

    def llm(self, generator: torch.Generator) -> HFLLM:
        """The learner's weights as they are when it samples, as the few-shot Solver samples, drawing from
        `generator`."""
        return HFLLM(
            self.learner.sampler,
            self.learner.tokenizer,
            solver_sampling(self.solver),
            chat=False,
            batch_size=self.solver.batch_size,
            generator=generator,
        )

    def due(self, iteration: int) -> bool:
        return (iteration + 1) % self.config.learn_every == 0

    def collect(self, results: Sequence[SolverResult]) -> int:
        """This rank's passing attempts, and every other rank's (all ranks call it together), into the replay
        buffer; returns how many pairs it accepted (every rank alike)."""
        everyone = from_every_rank(verified_pairs(results))
        return self.learner.replay.add([pair for pairs in everyone for pair in pairs])

    def learn(
        self, sum_over_ranks, rank: int, world_size: int, sampling: Callable[[], contextlib.AbstractContextManager]
    ) -> dict:
        """A BC phase and the evaluations after it (the initial Solver's before it, the first time), sampled under
        `sampling()` (the run's precision): one record."""
        started = time.perf_counter()
        record: dict = {}
        if self.evaluations == 0:
            with sampling():
                record["initial"] = self.evaluate(rank, world_size)
        learning = time.perf_counter()
        record["bc"] = self.learner.learn(sum_over_ranks, rank, world_size)
        record["bc"]["seconds"] = time.perf_counter() - learning
        record["phase"] = self.learner.phases
        with sampling():
            record["learned"] = self.evaluate(rank, world_size)
        record["eval_seconds"] = time.perf_counter() - started - record["bc"]["seconds"]
        return record

    def evaluate(self, rank: int, world_size: int) -> dict[str, dict]:
        """pass@1 and pass@K of the learner's weights as they are now, on each evaluation set, every rank
        attempting its share of the puzzles. Every evaluation samples from a generator seeded alike (by the run's
        seed and the rank), apart from the rollout's (evaluating does not change what the run samples): each row
        draws the same random numbers at every evaluation, so two evaluations differ by the weights alone, not by
        the draws (common random numbers: a paired comparison of phases)."""
        generator = torch.Generator().manual_seed(self.seed * 1000 + rank)
        solver = FewShotSolver(
            self.llm(generator),
            self.sandbox,
            self.learner.examples,
            replace(self.solver, attempts=self.config.eval_attempts),
        )
        summaries = {}
        for name, puzzles in (("heldout_families", self.heldout), ("eval_file", self.eval_file)):
            if puzzles:
                mine = solver.solve(puzzles[rank::world_size])
                summaries[name] = solver_summary([result for results in from_every_rank(mine) for result in results])
        self.evaluations += 1
        return summaries

    def state_dict(self) -> dict:
        return {"learner": self.learner.state_dict(), "evaluations": self.evaluations}

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.evaluations = state["evaluations"]
