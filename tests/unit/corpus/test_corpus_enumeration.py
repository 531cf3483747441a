"""The enumerating solution written from f's text returns what a naive loop calling f returns: the
least natural number f accepts, or the shortest string over f's letters. The corpus keeps it only when
it passes in the sandbox."""

import itertools
import json
import re

import pytest

from codeplay_lightning.corpus.build import Instance, p3_entry, with_enumerations
from codeplay_lightning.corpus.enumeration import enumerating_solution
from codeplay_lightning.corpus.family import defined
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.sft.data import training_puzzles

ENUMERABLE = {
    "one line": """def f(n: int):
    return n * n > 300 and n % 7 == 3""",
    "constants first": """def f(i: int):
    xs = [4, 9, 2, 9, 7]
    target = 9
    return xs[i] == target and xs.count(target) == 2 and i > 1""",
    "constants as default arguments": """def f(i: int, xs=[4, 9, 2, 9, 7], target=9):
    return xs[i] == target and xs.count(target) == 2 and i > 1""",
    "a default the body changes": """def f(i: int, a=1, b=1):
    for _ in range(i):
        a, b = b, a + b
    return b > 1000""",
    "a statement reads the answer": """def f(n: int):
    digits = str(n)
    return len(digits) == 3 and sum(map(int, digits)) == 20""",
    "state rebuilt for every number": """def f(i: int):
    a, b = 1, 1
    for _ in range(i):
        a, b = b, a + b
    return b > 1000""",
    "a condition over several lines": """def f(k: int):
    squares = {x * x for x in range(50)}
    return (k > 10 and
            k in squares and
            k % 4 == 1)""",
}


@pytest.mark.parametrize("f", ENUMERABLE.values(), ids=ENUMERABLE.keys())
def test_enumerating_solution_returns_the_least_number_f_accepts(f):
    g = enumerating_solution(f)
    check = defined(f, "f")
    naive = next(n for n in range(10**6) if check(n))
    assert defined(g, "g")() == naive
    assert g.startswith("def g():\n") and "range(10 ** 6)" in g


SEARCHABLE = {
    "a literal": 'def f(s: str):\n    return s + s[::-1] == "abba"',
    "letters and a count": 'def f(s: str, n=5):\n    return len(s) == n and s.count("x") == 2 and "yy" in s',
    "a statement reads the answer": """def f(path: str):
    end = (path.count("R"), path.count("U"))
    return end == (2, 3) and "RR" not in path""",
}


@pytest.mark.parametrize("f", SEARCHABLE.values(), ids=SEARCHABLE.keys())
def test_enumerating_solution_of_a_text_returns_the_first_string_over_f_letters_f_accepts(f):
    g = enumerating_solution(f)
    check = defined(f, "f")
    letters = sorted({c for text in re.findall(r'"([^"]*)"', f) for c in text})
    naive = next(s for n in itertools.count(1) for s in map("".join, itertools.product(letters, repeat=n)) if check(s))
    assert defined(g, "g")() == naive
    assert f'product("{"".join(letters)}", repeat=n)' in g


def test_constants_that_do_not_read_the_answer_are_set_once_before_the_loop():
    g = enumerating_solution(ENUMERABLE["constants first"])
    assert g.index("xs = [4, 9, 2, 9, 7]") < g.index("for i in range")
    from_defaults = enumerating_solution(ENUMERABLE["constants as default arguments"])
    assert from_defaults.index("xs = [4, 9, 2, 9, 7]\n    target = 9") < from_defaults.index("for i in range")
    rebuilt = enumerating_solution(ENUMERABLE["state rebuilt for every number"])
    assert rebuilt.index("for i in range") < rebuilt.index("a, b = 1, 1")


@pytest.mark.parametrize(
    "f",
    [
        "def f(s: str):\n    return len(s) == 3",  # a text without string constants to draw letters from
        "def f(xs: List[int]):\n    return sum(xs) == 3",  # neither a number nor a text
        "def f(n: int, m: int):\n    return n + m == 3",  # two arguments
        "def f(n: int, m: int, k=1):\n    return n + m == k",  # two arguments without defaults
        "def f(n):\n    return n == 3",  # no annotation
        "def f(n: int):\n    n = n * 2\n    return n == 8",  # changes its argument
        "def f(n: int):\n    assert n > 2",  # no final return
    ],
)
def test_enumerating_solution_is_none_where_it_cannot_be_written(f):
    assert enumerating_solution(f) is None


def test_the_corpus_keeps_an_enumeration_only_when_it_passes_and_trains_on_both_solutions(tmp_path):
    def instance(f: str, g: str, ans_type: str) -> Instance:
        return Instance("hand", "numbers", 1, f, g, ans_type)

    instances = [
        instance("def f(n: int):\n    return n * n == 49", "def g():\n    return 7", "int"),
        instance("def f(n: int):\n    return n == 10 ** 7", "def g():\n    return 10 ** 7", "int"),
        instance('def f(s: str):\n    return s == "ab"', 'def g():\n    return "ab"', "str"),
    ]
    with Sandbox(workers=1, timeout=2.0) as sandbox:
        kept = with_enumerations(instances, sandbox)
    assert [bool(one.enumerating_g) for one in kept] == [True, False, True]
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([p3_entry(one, index) for index, one in enumerate(kept)]))
    trained = training_puzzles([corpus])
    assert [puzzle.solutions[0] for puzzle in trained if puzzle.f == instances[0].f] == [
        instances[0].g,
        kept[0].enumerating_g,
    ]
    assert len(trained) == 5
