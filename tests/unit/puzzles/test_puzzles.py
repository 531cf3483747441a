"""Puzzles: validation of Setter outputs, the P3 loader, the block format and the prompts."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from support import FIXTURES

from codeplay_lightning.execution import Program
from codeplay_lightning.puzzles import (
    SETTER_STOP,
    SOLVER_STOP,
    Puzzle,
    answer_type,
    check_puzzle,
    in_classes,
    load_p3,
    load_p3_split,
    parse_puzzle_blocks,
    puzzle_class,
    setter_prompt,
    solver_prompt,
)

P3_SMALL = FIXTURES / "p3_small"


# ---------------------------------------------------------------- validation


def test_valid_puzzle_keeps_its_source_without_trailing_blank_lines():
    text = 'def f(s: str, n=3):\n    return s == "ab" * n\n\n'
    check = check_puzzle(text, name="setter-7")
    assert check.valid and check.reason is None
    assert check.puzzle == Puzzle(name="setter-7", f=text.rstrip())


def test_valid_puzzle_may_define_helpers_around_f():
    check = check_puzzle("import math\n\ndef helper(x):\n    return x\n\ndef f(x: int):\n    return helper(x) == 2")
    assert check.valid


@pytest.mark.parametrize(
    "text, reason",
    [
        ("def f(x: int):\n    return x ==\n", "syntax error: invalid syntax (line 2)"),
        ("def f(x: int)\n    return True", "syntax error: expected ':' (line 1)"),
        (
            "def f(x: int):\nreturn True",
            "syntax error: expected an indented block after function definition on line 1 (line 2)",
        ),
        ("", "no function named f"),
        ("def h(x: int):\n    return True", "no function named f"),
        ("f = lambda x: True", "no function named f"),
        ("class Box:\n    def f(self, x):\n        return True", "no function named f"),
        ("async def f(x: int):\n    return True", "no function named f"),
        ("def f():\n    return True", "f takes no positional argument"),
        ("def f(*, x: int):\n    return True", "f takes no positional argument"),
        ("x = " + "(" * 300 + ")" * 300, "syntax error: too many nested parentheses (line 1)"),
        ("x = " + "-" * 10_000 + "1", "syntax error: nested too deeply to parse"),
    ],
)
def test_invalid_puzzles_say_why(text: str, reason: str):
    check = check_puzzle(text)
    assert (check.valid, check.reason, check.puzzle) == (False, reason, None)


def test_the_last_definition_of_f_is_the_one_checked():
    assert not check_puzzle("def f(x: int):\n    return True\n\ndef f():\n    return True").valid
    assert check_puzzle("def f():\n    return True\n\ndef f(x: int):\n    return True").valid


@pytest.mark.parametrize(
    "annotation",
    [
        "",
        ": list",
        ": List",
        ": dict",
        ": tuple",
        ": Dict[str, int]",
        ": Tuple[int, int]",
        ": Set[int]",
        ": Optional[int]",
        ": int | None",
        ": complex",
        ": List[complex]",
        ": 'int'",
        ": list[tuple]",
    ],
)
def test_puzzles_the_judge_cannot_check_are_invalid_with_the_reason(annotation: str):
    check = check_puzzle(f"def f(x{annotation}) -> bool:\n    return True")
    assert not check.valid
    assert "no type annotation" in check.reason if not annotation else "unsupported answer type" in check.reason


def _answer_of(annotation: str):
    """A value of a P3 answer type: the base type's value inside as many lists as the type nests."""
    depth = annotation.count("[")
    base = annotation.replace("List[", "").replace("list[", "").replace("]", "").strip()
    value = {"bool": True, "int": 3, "float": 2.5, "str": "s"}[base]
    for _ in range(depth):
        value = [value]
    return value


ANNOTATIONS = [
    "bool",
    "int",
    "float",
    "str",
    "List[int]",
    "list[int]",
    "List[List[str]]",
    "list[List[float]]",
    "List[ bool ]",
    "List[List[List[int]]]",
    "list",
    "dict",
    "List",
    "Tuple[int]",
    "set[int]",
    "object",
]


def test_every_puzzle_check_puzzle_accepts_can_be_passed(sandbox):
    """The property behind the check: an accepted puzzle is passed by a correct answer of its type."""
    accepted = [
        annotation
        for annotation in ANNOTATIONS
        if check_puzzle(f"def f(x: {annotation}) -> bool:\n    return True").valid
    ]
    assert accepted == ANNOTATIONS[:10]
    programs = [
        Program(
            f"def f(x: {annotation}) -> bool:\n    return x == {_answer_of(annotation)!r}",
            f"def g():\n    return {_answer_of(annotation)!r}",
        )
        for annotation in accepted
    ]
    assert [verdict.status for verdict in sandbox.verify(programs)] == ["pass"] * len(accepted)


def test_answer_type_prefers_the_explicit_type():
    puzzle = Puzzle(name="p", f="def f(x: List[int]):\n    return True", ans_type="List[float]")
    assert answer_type(puzzle) == "List[float]"


@pytest.mark.parametrize(
    "f, expected",
    [
        ("def f(grid: List[List[int]], n=3):\n    return True", "List[List[int]]"),
        ("def f(s: 'str'):\n    return True", "'str'"),
        ("def f(grid: List[ List[int] ]):\n    return True", "List[List[int]]"),
        ("def f(grid: List[\n        List[int]]):\n    return True", "List[List[int]]"),
        ("def f(x, y: int = 2):\n    return True", None),
    ],
)
def test_answer_type_falls_back_to_the_first_annotation(f: str, expected: str | None):
    assert answer_type(Puzzle(name="p", f=f)) == expected


def test_answer_type_of_a_broken_puzzle_names_it():
    with pytest.raises(ValueError, match=r"puzzle 'broken': no function named f"):
        answer_type(Puzzle(name="broken", f="def g():\n    return 1"))


# ---------------------------------------------------------------- P3 loader


@pytest.fixture(scope="module")
def p3_small() -> dict[str, Puzzle]:
    return {puzzle.name: puzzle for puzzle in load_p3(P3_SMALL / "puzzles.json")}


def test_p3_loader_reads_every_instance_in_order(p3_small: dict[str, Puzzle]):
    raw = json.loads((P3_SMALL / "puzzles.json").read_text())
    assert list(p3_small) == [entry["name"] for entry in raw]
    assert [puzzle.ans_type for puzzle in p3_small.values()] == [entry["ans_type"] for entry in raw]
    assert [len(puzzle.solutions) for puzzle in p3_small.values()] == [len(entry["sol_bodies"]) for entry in raw]


def test_p3_loader_renames_sat_and_keeps_its_parameters(p3_small: dict[str, Puzzle]):
    puzzle = p3_small["Greeting:1"]
    assert puzzle.f == 'def f(s: str, name="bob"):\n    return s == "hello " + name'
    assert check_puzzle(puzzle.f).valid
    assert answer_type(Puzzle(name="", f=p3_small["Diagonal:0"].f)) == "List[List[int]]"


def test_p3_loader_joins_header_and_each_body_into_a_g(p3_small: dict[str, Puzzle]):
    assert p3_small["DistinctPair:0"].solutions == (
        "def g(total=10):\n    return [1, total - 1]",
        "def g(total=10):\n    return [total, 0]",
    )
    assert p3_small["OddPerfect:0"].solutions == ()
    assert p3_small["Greeting:0"].solutions == ('def g(name="ada"):\n    return "hello " + name',)  # no docstring


def test_p3_loader_aliases_the_old_name_only_when_the_code_mentions_it(p3_small: dict[str, Puzzle]):
    recursive = p3_small["FactorialOf:0"].solutions[0]
    assert recursive.startswith("def g(value=120, n=1):\n") and recursive.endswith("\nsol = g")
    assert not p3_small["Greeting:0"].solutions[0].endswith("= g")
    namespace: dict = {}
    exec(p3_small["FactorialOf:0"].f, namespace)  # our own fixture's code: the renamed recursion runs
    exec(recursive, namespace)
    assert namespace["g"]() == 5 and namespace["f"](namespace["g"]()) is True


def test_p3_split_selects_instances_by_class(p3_small: dict[str, Puzzle]):
    split = load_p3_split(P3_SMALL / "split.json")
    puzzles = list(p3_small.values())
    train, test = in_classes(puzzles, split["train"]), in_classes(puzzles, split["test"])
    assert [p.name for p in train] == ["Greeting:0", "Greeting:1", "DistinctPair:0", "FactorialOf:0"]
    assert [p.name for p in test] == ["OddPerfect:0", "ReversedWords:0", "Diagonal:0"]
    assert {puzzle_class(p) for p in train} == set(split["train"])
    assert puzzle_class(p3_small["HalfOf:0"]) == "HalfOf" and p3_small["HalfOf:0"] not in train + test


def _entry(**changes) -> dict:
    entry = {
        "name": "A:0",
        "sat": "def sat(x: int):\n    return x == 1",
        "ans_type": "int",
        "sol_header": "def sol():",
        "sol_docstring": "",
        "sol_bodies": ["    return 1"],
    }
    return {**entry, **changes}


@pytest.mark.parametrize(
    "content, message",
    [
        ("[{", "not valid JSON"),
        ('{"name": "A:0"}', "expected a JSON list of puzzles, got dict"),
        ([3], r"entry 0: expected an object, got int"),
        ([_entry(sat=None)], r"entry 0: field 'sat' must be a string"),
        ([_entry(), _entry(ans_type=None)], r"entry 1: field 'ans_type' must be a string"),
        ([_entry(sol_bodies="    return 1")], r"entry 0 \(A:0\): field 'sol_bodies' must be a list of strings"),
        ([_entry(sat="def check(x):\n    return True")], r"entry 0 \(A:0\): expected source starting with 'def sat\('"),
        ([_entry(sol_bodies=['    return """sol'])], r"entry 0 \(A:0\): cannot tokenize sol: EOF in multi-line string"),
    ],
)
def test_p3_loader_rejects_ill_formed_files(tmp_path: Path, content, message: str):
    path = tmp_path / "puzzles.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ValueError, match=f"^{path}: .*{message}"):
        load_p3(path)


def test_p3_loader_names_a_missing_file(tmp_path: Path):
    with pytest.raises(ValueError, match=f"^{tmp_path}/absent.json: cannot read: No such file"):
        load_p3(tmp_path / "absent.json")


@pytest.mark.parametrize(
    "content, message",
    [
        ({"train": ["A"]}, 'expected an object with exactly the keys "train" and "test"'),
        ({"train": ["A"], "test": ["B"], "valid": []}, 'expected an object with exactly the keys "train" and "test"'),
        ({"train": "A", "test": ["B"]}, "'train' must be a list of class names"),
        ({"train": ["A"], "test": [1]}, "'test' must be a list of class names"),
    ],
)
def test_p3_split_rejects_ill_formed_files(tmp_path: Path, content: dict, message: str):
    path = tmp_path / "split.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=f"^{path}: {message}"):
        load_p3_split(path)


# ---------------------------------------------------------------- block format

BLOCKS = """# a comment before the first header

### name: double | type: int | tags: fewshot
def f(n: int):
    return n * 2 == 10

def g():
    return 5

# a comment between solutions is not part of either
def g():
    # this comment is part of the solution
    return 10 // 2

### name: word | type: str
def f(s: str, word="abc"):
    return s == word

def g():
    return "abc"
"""


def test_blocks_give_puzzles_with_every_solution_and_tag():
    double, word = parse_puzzle_blocks(BLOCKS, "blocks.txt")
    assert double == Puzzle(
        name="double",
        f="def f(n: int):\n    return n * 2 == 10",
        solutions=(
            "def g():\n    return 5",
            "def g():\n    # this comment is part of the solution\n    return 10 // 2",
        ),
        ans_type="int",
        tags=("fewshot",),
    )
    assert (word.name, word.ans_type, word.tags, len(word.solutions)) == ("word", "str", (), 1)


F_AND_G = "def f(x):\n    return True\n\ndef g():\n    return 1\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("stray text\n### name: a | type: int\n" + F_AND_G, "line 1: text before the first '###' header"),
        ("### name: a\n" + F_AND_G, "line 1: the header needs a name and a type"),
        ("### name: a | type: int | level: 3\n", "line 1: expected 'name: ...', .* got 'level: 3'"),
        ("### name: a | type: int | tags: hard\n" + F_AND_G, r"line 1: unknown tags \['hard'\]"),
        ("### name: a | type: int\ndef f(x):\n    return True\n", "line 1: a block holds one 'def f' then one or more"),
        ("### name: a | type: int\ndef g():\n    return 1\n\ndef f(x):\n    return True", "line 1: a block holds"),
        ("### name: a | type: int\nimport math\n" + F_AND_G, "line 1: a block holds"),
        ("### name: a | type: int\n@staticmethod\n" + F_AND_G, "line 1: a block holds"),
        ("\n### name: a | type: int\ndef f(x):\n    return True\n\ndef g(:\n    return 1", "line 6: invalid syntax"),
        ("### name: a | type: int\n" + F_AND_G + "### name: a | type: str\n" + F_AND_G, "line 7: duplicate name 'a'"),
    ],
)
def test_ill_formed_blocks_are_rejected_with_their_line(text: str, message: str):
    with pytest.raises(ValueError, match=f"^blocks.txt {message}"):
        parse_puzzle_blocks(text, "blocks.txt")


# ---------------------------------------------------------------- prompts

EXAMPLES = [
    Puzzle(name="one", f="def f(s: str):\n    return s == 'a'", solutions=("def g():\n    return 'a'",)),
    Puzzle(
        name="two",
        f="def f(n: int, k=3):\n    return n % k == 1\n",
        solutions=("def g():\n    return 4\n", "def g():\n    return 7"),
    ),
    Puzzle(name="three", f="def f(li: List[int]):\n    return sum(li) == 3", solutions=("def g():\n    return [3]",)),
]
PUZZLE = Puzzle(name="target", f="def f(x: float):\n    return x * 2 == 1.0\n\n")


def _functions(source: str) -> list[str]:
    return [ast.unparse(node) for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]


def _asserts(source: str) -> int:
    return sum(isinstance(node, ast.Assert) for node in ast.parse(source).body)


def test_setter_prompt_is_the_examples_in_order_ending_after_an_assert():
    prompt = setter_prompt(EXAMPLES)
    assert prompt.startswith("from typing import List\n\n")
    assert prompt.endswith("\n\nassert f(g())\n\n")
    expected = [ast.unparse(ast.parse(code)) for p in EXAMPLES for code in (p.f, p.solutions[0])]
    assert _functions(prompt) == expected  # first solution only, in the examples' order
    assert _asserts(prompt) == len(EXAMPLES)
    assert "\n\n\n" not in prompt  # exactly one blank line between parts, as in the paper


def test_setter_continues_with_a_new_puzzle_that_stops_at_the_blank_line():
    generated = "def f(n: int):\n    return n > 3\n\ndef g():\n    return 4"
    puzzle_text = generated[: generated.index(SETTER_STOP[0])]
    assert _functions(setter_prompt(EXAMPLES) + puzzle_text)[-1] == puzzle_text
    assert check_puzzle(puzzle_text).valid


def test_solver_prompt_appends_the_puzzle_and_a_g_header():
    prompt = solver_prompt(EXAMPLES, PUZZLE)
    assert prompt.startswith(setter_prompt(EXAMPLES))
    assert prompt.endswith(PUZZLE.f.rstrip() + "\n\ndef g():")
    completed = prompt + "\n    return 0.5"
    assert _functions(completed)[-2:] == [PUZZLE.f.strip(), "def g():\n    return 0.5"]


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    return text[: min((text.index(stop) for stop in stops if stop in text), default=len(text))]


@pytest.mark.parametrize(
    "generated, body",
    [
        ("\n    return 0.5\n\nassert f(g())\n\ndef f(", "\n    return 0.5\n"),
        ("\n    x = 1.0\n\n    return x / 2\n\ndef f(s: str):", "\n    x = 1.0\n\n    return x / 2\n"),
        ("\n    return 0.5\n\n\nprint(g())", "\n    return 0.5"),
        (
            "\n    def half(y):\n        return y / 2\n    return half(1.0)\nassert f(g())",
            "\n    def half(y):\n        return y / 2\n    return half(1.0)",
        ),
    ],
)
def test_solver_stops_after_g_but_not_at_a_blank_line_inside_it(generated: str, body: str):
    assert _cut_at_stop(generated, SOLVER_STOP) == body


def test_few_shot_examples_need_a_solution():
    with pytest.raises(ValueError, match="few-shot example 'bare' has no solution"):
        setter_prompt([*EXAMPLES, Puzzle(name="bare", f="def f(x):\n    return True")])


def test_the_puzzles_to_solve_of_a_p3_split_are_its_classes_instances():
    from codeplay_lightning.puzzles.files import puzzles_to_solve

    split = json.loads((P3_SMALL / "split.json").read_text())
    raw = [entry["name"] for entry in json.loads((P3_SMALL / "puzzles.json").read_text())]
    for part in ("train", "test"):
        chosen = puzzles_to_solve(P3_SMALL / "puzzles.json", part, p3_split=P3_SMALL / "split.json")
        assert [p.name for p in chosen] == [name for name in raw if name.split(":")[0] in split[part]]
    assert len(puzzles_to_solve(P3_SMALL / "puzzles.json", "neither", p3_split=P3_SMALL / "split.json")) == 1
    assert len(puzzles_to_solve(P3_SMALL / "puzzles.json", "test", limit=2, p3_split=P3_SMALL / "split.json")) == 2
    with pytest.raises(ValueError, match="takes --p3-split"):
        puzzles_to_solve(P3_SMALL / "puzzles.json", "test")
