"""P3's signature: f's leading literal constants become default arguments, and f accepts exactly what
it accepted before."""

import pytest

from codeplay_lightning.corpus.family import defined
from codeplay_lightning.corpus.signature import constants_as_defaults

BODY_CONSTANTS = """def f(i: int):
    xs, target = [4, 9, 2, 9,
                  7], 9
    label = "nine"
    n = len(xs)
    k = 2
    return 1 < i < n and xs[i] == target and xs.count(target) == k and label"""


def test_leading_literals_move_into_the_signature_in_order_and_f_accepts_the_same_answers():
    lifted = constants_as_defaults(BODY_CONSTANTS)
    # A multi-line literal joins onto one line; lifting stops at the first computed statement.
    assert lifted.splitlines()[0] == 'def f(i: int, xs=[4, 9, 2, 9, 7], target=9, label="nine"):'
    assert lifted.splitlines()[1:] == BODY_CONSTANTS.splitlines()[4:]
    before, after = defined(BODY_CONSTANTS, "f"), defined(lifted, "f")
    assert [after(i) for i in range(-2, 8)] == [before(i) for i in range(-2, 8)]
    assert any(after(i) for i in range(8))


@pytest.mark.parametrize(
    "f",
    [
        "def f(n: int):\n    return n == 3",  # no constants
        "def f(n: int):\n    m = abs(-3)\n    return n == m",  # computed, not a literal
        "def f(n: int):\n    n = 3\n    return n == 3",  # would rebind the answer
        "def f(n: int):\n    a = 1\n    for _ in range(n):\n        a *= 2\n    return a == 8",  # state, not a constant
        "def f(n: int):\n    a, b = 1, abs(2)\n    return n == a + b",  # one side computed
        "def f(\n    n: int,\n):\n    m = 3\n    return n == m",  # parameters over several lines
        "def f(s: str):\n    t = 'ab'\n    t = 'cd'\n    return s == t",  # assigned again
        "def f(s: str):\n    return s == 'ab'",  # the constant sits in the return
    ],
)
def test_f_is_unchanged_without_a_leading_constant_it_could_lift(f):
    assert constants_as_defaults(f) == f
