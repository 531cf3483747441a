"""Hostile puzzle and solution text: every reader of program text in the trainer gives its normal
refusal or value, never a RecursionError (or MemoryError) from nesting deeper than its stack."""

from __future__ import annotations

import pytest

from codeplay_lightning.corpus.enumeration import enumerating_solution
from codeplay_lightning.corpus.signature import constants_as_defaults
from codeplay_lightning.puzzles import Puzzle, answer_type, check_puzzle, parse_puzzle_blocks
from codeplay_lightning.setter.rollout import judge_puzzles
from codeplay_lightning.solver import candidate_program

PLUS_500 = "+".join(["1"] * 500)  # parses, but rebuilding it from its tree recurses 500 deep
ONE_MEGABYTE_LIST = "[" + ", ".join(["1"] * 333_334) + "]"  # one line of 1 MB that parses
NESTED_TOO_DEEPLY = "syntax error: nested too deeply to parse"
TOO_MANY_PARENTHESES = "syntax error: too many nested parentheses (line 1)"
PAST_THE_PARSER = {  # annotation (or expression) -> check_puzzle's reason
    "+".join(["1"] * 100_000): NESTED_TOO_DEEPLY,
    "(" * 300 + "1" + ")" * 300: TOO_MANY_PARENTHESES,
    "-" * 100_000 + "1": NESTED_TOO_DEEPLY,
    "List[" * 1000 + "int" + "]" * 1000: TOO_MANY_PARENTHESES,
}
NULL_BYTE_F = "def f(x: int):\n    return x == 1\0\n"
NAMES = ["100,000 chained +", "300 nested parentheses", "100,000 unary minus", "List nested 1000 deep"]


def _f(annotation: str) -> str:
    return f"def f(x: {annotation}):\n    return True"


@pytest.mark.parametrize("annotation, reason", PAST_THE_PARSER.items(), ids=NAMES)
def test_check_puzzle_refuses_an_annotation_nested_past_the_parser(annotation: str, reason: str):
    check = check_puzzle(_f(annotation))
    assert (check.valid, check.reason, check.puzzle) == (False, reason, None)


def test_check_puzzle_refuses_an_annotation_too_deep_to_rebuild_as_an_unsupported_type():
    check = check_puzzle(_f(PLUS_500))
    assert not check.valid
    assert check.reason.startswith("unsupported answer type '1+1+1")


def test_check_puzzle_refuses_a_null_byte_as_a_syntax_error():
    check = check_puzzle(NULL_BYTE_F)
    assert not check.valid and check.reason.startswith("syntax error")


@pytest.mark.timeout(10)  # parsing the megabyte takes about 3 s; cutting the annotation is linear
def test_check_puzzle_accepts_a_one_megabyte_line_in_seconds():
    check = check_puzzle(f"def f(x: int): return x in {ONE_MEGABYTE_LIST}")
    assert check.valid and check.puzzle.f.endswith("1, 1]")


@pytest.mark.parametrize("annotation, reason", PAST_THE_PARSER.items(), ids=NAMES)
def test_answer_type_names_the_puzzle_it_cannot_parse(annotation: str, reason: str):
    with pytest.raises(ValueError) as raised:
        answer_type(Puzzle(name="hostile", f=_f(annotation)))
    assert str(raised.value) == f"puzzle 'hostile': {reason}"


def test_answer_type_of_an_annotation_too_deep_to_rebuild_is_its_text():
    assert answer_type(Puzzle(name="p", f=_f(PLUS_500))) == PLUS_500


@pytest.mark.parametrize(
    "f", [_f(PLUS_500), *map(_f, PAST_THE_PARSER), NULL_BYTE_F], ids=["500 chained +", *NAMES, "null byte"]
)
def test_corpus_readers_leave_a_hostile_f_alone(f: str):
    assert constants_as_defaults(f) == f
    assert enumerating_solution(f) is None


def test_constants_as_defaults_skips_a_literal_that_cannot_be_built():
    f = "def f(x: int):\n    table = {[1]: 2}\n    return x in table"
    assert constants_as_defaults(f) == f


def test_constants_as_defaults_lifts_a_one_megabyte_literal():
    lifted = constants_as_defaults(f"def f(x: int):\n    xs = {ONE_MEGABYTE_LIST}\n    return x in xs")
    assert lifted == f"def f(x: int, xs={ONE_MEGABYTE_LIST}):\n    return x in xs"


@pytest.mark.parametrize(
    "f, problem",
    [
        *(
            (_f(annotation), reason.removeprefix("syntax error: ").removesuffix(" (line 1)"))
            for annotation, reason in PAST_THE_PARSER.items()
        ),
        (NULL_BYTE_F, "null byte"),
    ],
    ids=[*NAMES, "null byte"],
)
def test_parse_puzzle_blocks_rejects_a_hostile_block_with_its_line(f: str, problem: str):
    with pytest.raises(ValueError, match=r"^blocks\.txt line \d+: .*" + problem):
        parse_puzzle_blocks(f"### name: hostile | type: int\n{f}\n\ndef g():\n    return 1\n", "blocks.txt")


@pytest.mark.parametrize("expression", [PLUS_500, ONE_MEGABYTE_LIST], ids=["500 chained +", "1 MB line"])
def test_parse_puzzle_blocks_reads_a_long_expression(expression: str):
    (puzzle,) = parse_puzzle_blocks(
        f"### name: long | type: int\n{_f('int')}\n\ndef g():\n    return {expression}\n", "blocks.txt"
    )
    assert puzzle.solutions == (f"def g():\n    return {expression}",)


@pytest.mark.parametrize("expression", [*PAST_THE_PARSER, "1\0"], ids=[*NAMES, "null byte"])
def test_candidate_program_keeps_a_g_nested_past_the_parser_whole(expression: str):
    continuation = f"\n    return {expression}\nprint(f(g()))\n"
    assert candidate_program(Puzzle(name="p", f=_f("int")), continuation).g == "def g():" + continuation


@pytest.mark.parametrize("expression", [PLUS_500, ONE_MEGABYTE_LIST], ids=["500 chained +", "1 MB line"])
def test_candidate_program_cuts_the_code_after_a_long_g(expression: str):
    program = candidate_program(Puzzle(name="p", f=_f("int")), f"\n    return {expression}\nprint(f(g()))\n")
    assert program.g == f"def g():\n    return {expression}\n"


class _RecordingSolver:
    """Stands in for the Solver: records the puzzles it is given, returns one result each."""

    def __init__(self):
        self.given: list[Puzzle] = []

    def solve(self, puzzles):
        self.given.extend(puzzles)
        return [f"result of {puzzle.f}" for puzzle in puzzles]


def test_the_setter_rollout_judges_hostile_puzzles_invalid_and_solves_only_the_valid_one():
    valid = _f("int")
    texts = [_f(PLUS_500), *map(_f, PAST_THE_PARSER), NULL_BYTE_F, valid]
    solver = _RecordingSolver()
    judged = judge_puzzles(texts, solver)
    assert [check.valid for check, _ in judged] == [False] * (len(texts) - 1) + [True]
    assert [check.reason for check, _ in judged[1:-2]] == list(PAST_THE_PARSER.values())
    assert [result for _, result in judged] == [None] * (len(texts) - 1) + [f"result of {valid}"]
    assert [puzzle.f for puzzle in solver.given] == [valid]
