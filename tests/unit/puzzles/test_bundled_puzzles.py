"""The bundled puzzle set: size, coverage, few-shot examples, and every reference solution passing."""

from __future__ import annotations

import pytest

from codeplay_lightning.execution import Program, Sandbox
from codeplay_lightning.puzzles import (
    SETTER_STOP,
    Puzzle,
    answer_type,
    bundled_puzzles,
    check_puzzle,
    fewshot_puzzles,
)

ANSWER_TYPES = {"str", "int", "float", "List[int]", "List[str]", "List[float]", "List[List[int]]"}


@pytest.fixture(scope="module")
def puzzles() -> list[Puzzle]:
    return bundled_puzzles()


def test_the_set_is_large_with_unique_names(puzzles: list[Puzzle]):
    assert len(puzzles) >= 64
    assert len({puzzle.name for puzzle in puzzles}) == len(puzzles)


def test_every_answer_type_is_covered_and_matches_f(puzzles: list[Puzzle]):
    assert {puzzle.ans_type for puzzle in puzzles} == ANSWER_TYPES
    for puzzle in puzzles:
        assert check_puzzle(puzzle.f).valid, puzzle.name
        assert answer_type(Puzzle(name=puzzle.name, f=puzzle.f)) == puzzle.ans_type, puzzle.name
        assert puzzle.solutions, puzzle.name


def test_fewshot_puzzles_are_short_and_in_file_order(puzzles: list[Puzzle]):
    fewshot = fewshot_puzzles()
    assert len(fewshot) >= 12
    assert fewshot == [puzzle for puzzle in puzzles if "fewshot" in puzzle.tags]
    for puzzle in fewshot:
        assert 2 <= len(puzzle.f.splitlines()) <= 4, puzzle.name
        assert 2 <= len(puzzle.solutions[0].splitlines()) <= 4, puzzle.name
        assert SETTER_STOP[0] not in puzzle.f, puzzle.name  # the Setter learns that f ends at a blank line


def test_every_reference_solution_passes_in_the_sandbox(puzzles: list[Puzzle]):
    programs = [
        Program(f=puzzle.f, g=solution, ans_type=puzzle.ans_type, name=puzzle.name)
        for puzzle in puzzles
        for solution in puzzle.solutions
    ]
    with Sandbox(workers=2, timeout=1.0) as sandbox:
        verdicts = sandbox.verify(programs)
    failures = [(p.name, v.status, v.detail) for p, v in zip(programs, verdicts) if v.status != "pass"]
    assert failures == []
    slow = [(p.name, round(v.seconds, 3)) for p, v in zip(programs, verdicts) if v.seconds >= 0.2]
    assert slow == []
