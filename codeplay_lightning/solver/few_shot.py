"""The few-shot Solver of Codeplay: a frozen LM tries each puzzle N_a times, the sandbox judges.

For each puzzle the prompt is the few-shot block, the puzzle's `f` and `def g():`; each sampled
continuation, cut at the Solver stop strings, becomes a candidate `def g():` + continuation. All
(puzzle, attempt) rows are sampled in batches across puzzles, then verified in the sandbox.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from codeplay_lightning.execution import Program, Sandbox, Verdict
from codeplay_lightning.models.sampling import SamplingConfig, sample
from codeplay_lightning.puzzles import SOLVER_STOP, Puzzle, solver_prompt

G_HEADER = "def g():"  # the end of every Solver prompt; a candidate is this plus the continuation


def difficulty(attempts: int, passes: int) -> float:
    """D = N_a / passes: 1 when every attempt passes, math.inf when none does.

    >>> difficulty(8, 2)
    4.0
    >>> difficulty(8, 0)
    inf
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    if not 0 <= passes <= attempts:
        raise ValueError(f"passes must be in [0, {attempts}], got {passes}")
    return attempts / passes if passes else math.inf


@dataclass
class SolverConfig:
    attempts: int = 8  # N_a: candidate solutions sampled per puzzle
    batch_size: int = 32  # (puzzle, attempt) rows per sampling batch, across puzzles
    max_new_tokens: int = 128  # length cap of one candidate g
    temperature: float = 0.8  # > 0: the N_a attempts must differ
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (greedy attempts all agree), got {self.temperature}")


@dataclass(frozen=True)
class PuzzleResult:
    """The Solver's attempts at one puzzle: candidate programs and their verdicts, in attempt order."""

    puzzle: Puzzle
    programs: tuple[Program, ...]
    verdicts: tuple[Verdict, ...]

    @property
    def attempts(self) -> int:
        return len(self.programs)

    @property
    def passes(self) -> int:
        return sum(verdict.passed for verdict in self.verdicts)

    @property
    def difficulty(self) -> float:
        return difficulty(self.attempts, self.passes)


class FewShotSolver:
    """Samples `config.attempts` candidate `g` per puzzle from a frozen LM and verifies them."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        sandbox: Sandbox,
        examples: Sequence[Puzzle],
        config: SolverConfig,
    ) -> None:
        if not examples:
            raise ValueError("the Solver prompt needs at least one few-shot example")
        self.model, self.tokenizer, self.sandbox = model, tokenizer, sandbox
        self.examples = tuple(examples)
        self.config = config
        self.sampling = SamplingConfig(config.max_new_tokens, config.temperature, config.top_p, SOLVER_STOP)

    def solve(
        self,
        puzzles: Sequence[Puzzle],
        *,
        generator: torch.Generator | None = None,
        on_batch_done: Callable[[int, int], None] | None = None,
    ) -> list[PuzzleResult]:
        """One result per puzzle, in order.

        `generator` makes the run reproducible and, up to float rounding, independent of
        `batch_size`: it seeds one generator per (puzzle, attempt). Without it sampling uses the
        global torch RNG.
        `on_batch_done(rows_done, rows_total)` is called after each batch is sampled and verified;
        a row is one (puzzle, attempt).
        """
        attempts = self.config.attempts
        n_rows = len(puzzles) * attempts  # row r is attempt r % attempts at puzzle r // attempts
        prompts = [solver_prompt(self.examples, puzzle) for puzzle in puzzles]
        row_generators = None
        if generator is not None:
            seeds = torch.randint(0, 2**62, (n_rows,), generator=generator).tolist()
            row_generators = [torch.Generator().manual_seed(seed) for seed in seeds]

        programs: list[Program] = []
        verdicts: list[Verdict] = []
        for start in range(0, n_rows, self.config.batch_size):
            batch = range(start, min(start + self.config.batch_size, n_rows))
            samples = sample(
                self.model,
                self.tokenizer,
                [prompts[row // attempts] for row in batch],
                self.sampling,
                row_generators[batch.start : batch.stop] if row_generators is not None else None,
            )
            batch_programs = [
                candidate_program(puzzles[row // attempts], text) for row, text in zip(batch, samples.texts)
            ]
            verdicts.extend(self.sandbox.verify(batch_programs))
            programs.extend(batch_programs)
            if on_batch_done is not None:
                on_batch_done(len(programs), n_rows)

        return [
            PuzzleResult(
                puzzle,
                tuple(programs[index * attempts : (index + 1) * attempts]),
                tuple(verdicts[index * attempts : (index + 1) * attempts]),
            )
            for index, puzzle in enumerate(puzzles)
        ]


def candidate_program(puzzle: Puzzle, continuation: str) -> Program:
    """The program judging `def g():` + `continuation` (already cut at the stop) against `puzzle`."""
    return Program(f=puzzle.f, g=G_HEADER + continuation, ans_type=puzzle.ans_type, name=puzzle.name)
