"""The few-shot Solver of Codeplay: a frozen LM tries each puzzle N_a times, the sandbox judges.

For each puzzle the prompt is the few-shot block, the puzzle's `f` and `def g():`; each completion,
cut at the Solver stop strings, becomes a candidate `def g():` + completion. All (puzzle, attempt)
rows go to the LLM in batches across puzzles, then to the sandbox.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codeplay_lightning.config import SolverConfig
from codeplay_lightning.execution import Program, Sandbox, Verdict
from codeplay_lightning.llm.interface import LLM
from codeplay_lightning.puzzles import Puzzle, solver_prompt
from codeplay_lightning.puzzles.parsing import UNPARSABLE

G_HEADER = "def g():"  # the end of every Solver prompt; a candidate is this plus the continuation
LINE_BREAK = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")  # after each line break Python's parser counts: \n, \r\n, \r


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

    @property
    def judge_faults(self) -> int:
        return sum(verdict.judge_fault for verdict in self.verdicts)


ROWS_PER_CALL = 8  # batches of rows in one LLM call: progress and verification after each call


class FewShotSolver:
    """Draws `config.attempts` candidate `g` per puzzle from a frozen LM and verifies them.

    `llm` must continue raw prompts (not chat) with `solver_sampling(config)`'s settings, which stop at the
    Solver stop strings; it makes the run reproducible when it is seeded (`HFLLM(generator=...)`).
    """

    def __init__(self, llm: LLM, sandbox: Sandbox, examples: Sequence[Puzzle], config: SolverConfig) -> None:
        if not examples:
            raise ValueError("the Solver prompt needs at least one few-shot example")
        self.llm, self.sandbox = llm, sandbox
        self.examples = tuple(examples)
        self.config = config

    def solve(
        self, puzzles: Sequence[Puzzle], *, on_batch_done: Callable[[int, int], None] | None = None
    ) -> list[PuzzleResult]:
        """One result per puzzle, in order.

        Rows go to the LLM `ROWS_PER_CALL` batches at a time (a local LLM refills its `config.batch_size` rows as
        they finish, so a call's rows wait for its longest once, not once a batch); a seeded `HFLLM` draws one
        seed per row in row order, so the samples do not depend on the batch size (up to float rounding).
        `on_batch_done(rows_done, rows_total)` is called after each call's rows are sampled and verified;
        a row is one (puzzle, attempt).
        """
        attempts = self.config.attempts
        n_rows = len(puzzles) * attempts  # row r is attempt r % attempts at puzzle r // attempts
        prompts = [solver_prompt(self.examples, puzzle) for puzzle in puzzles]

        programs: list[Program] = []
        verdicts: list[Verdict] = []
        rows_per_call = ROWS_PER_CALL * self.config.batch_size
        for start in range(0, n_rows, rows_per_call):
            batch = range(start, min(start + rows_per_call, n_rows))
            completions = self.llm.complete([prompts[row // attempts] for row in batch])
            batch_programs = [
                candidate_program(puzzles[row // attempts], text) for row, text in zip(batch, completions)
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
    """The program judging `def g():` + `continuation` (already cut at the stop) against `puzzle`.

    g ends where Python's parser ends its function, so a column-0 comment or a column-0 line inside a
    multi-line string stays in g, while top-level code after g (a `print(f(g()))`, say) is cut: it would
    run when g is defined. The text parsed is the longest that parses of: the whole candidate, then the
    candidate cut before each column-0 line of code (not a comment), since the code after g may itself be
    broken (cut by the token limit, say). When none parses, g itself is broken: the candidate stays whole
    and the sandbox reports its syntax error."""
    g = G_HEADER + continuation
    lines = LINE_BREAK.split(g)  # each line keeps its line break
    top_level = [index for index in range(len(lines) - 1, 0, -1) if lines[index][:1] not in " \t#\r\n"]
    for end in (len(lines), *top_level):
        try:
            g_end = ast.parse("".join(lines[:end])).body[0].end_lineno
        except UNPARSABLE:
            continue
        if "".join(lines[g_end:]).strip():
            g = "".join(lines[:g_end]).rstrip() + "\n"
        break
    return Program(f=puzzle.f, g=g, ans_type=puzzle.ans_type, name=puzzle.name)
