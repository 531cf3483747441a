"""Families whose `f` is a random conjunction of simple conditions on a natural number, over nothing, a
list or a text: no method short of trying 0, 1, 2, ... finds the answer.

The other families teach one method each, with a handful of condition shapes; a small model then
recalls a familiar condition where it should copy the one in front of it. Here the conditions differ
from instance to instance, so the only thing to learn is to carry f's own test into a search. The
family's `g` is a generator expression; the corpus adds the `for` loop form (`enumeration.py`).
The conditions avoid most constructs of the held-out families (digit sets, integer roots, distinct
larger values, insertion points), so those still measure transfer. One does not: `text[:i].count(c) == k`,
a count before a position (87 of 300 instances of `position_meeting_conditions_in_a_text`), is close kin
of the held-out `kth_occurrence_index`'s `text.count(pattern, 0, i) == k - 1`, so that family is not an
untouched test. It stays: the shipped warm start was trained on this corpus.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from codeplay_lightning.corpus.family import defined, families_in, family

SEARCH_LIMIT = 20_000  # the answer is below this, so the search passes well within the sandbox's time
_ANSWER_NAMES = ("n", "i", "k", "m", "x", "j")

# A condition: (rng, the answer's name v) -> a boolean expression in v, its constants drawn from rng.
Condition = Callable[[random.Random, str], str]

NUMBER_CONDITIONS: tuple[Condition, ...] = (
    lambda r, v: f"{v} % {(m := r.randint(2, 40))} == {r.randrange(m)}",
    lambda r, v: f"{v} % {r.randint(2, 12)} != 0",
    lambda r, v: f"{v} > {r.randint(10, 3000)}",
    lambda r, v: f"{(low := r.randint(1, 5000))} < {v} < {low + r.randint(20, 3000)}",
    lambda r, v: f"sum(int(d) for d in str({v})) == {r.randint(4, 30)}",
    lambda r, v: f'str({v}).count("{r.randint(0, 9)}") == {r.randint(1, 2)}',
    lambda r, v: f'bin({v}).count("1") == {r.randint(2, 7)}',
    lambda r, v: f"str({v}) == str({v})[::-1]",
    lambda r, v: f'str({v}).endswith("{r.randint(0, 99)}")',
    lambda r, v: f'str({v}).startswith("{r.randint(1, 99)}")',
    lambda r, v: f"len(str({v})) == {r.randint(2, 4)}",
    lambda r, v: f"{r.randint(2, 9)} * {v} + {r.randint(1, 99)} > {r.randint(100, 20_000)}",
    lambda r, v: f"{v} * {v} % {(m := r.randint(3, 30))} == {r.randrange(m)}",
    lambda r, v: f"{v} // {r.randint(2, 20)} % {(m := r.randint(2, 9))} == {r.randrange(m)}",
    lambda r, v: f"{v} & {(mask := r.choice([1, 2, 4, 8, 16, 32, 3, 5, 6, 9, 10, 12, 17, 20]))} == {mask}",
    lambda r, v: f"{v} > 1 and all({v} % d for d in range(2, int({v} ** 0.5) + 1))",
)
LIST_CONDITIONS: tuple[Condition, ...] = (  # on `xs`; an index is checked before it is used
    lambda r, v: f"{v} in xs",
    lambda r, v: f"{v} not in xs",
    lambda r, v: f"{v} < len(xs) and xs[{v}] > {r.randint(5, 60)}",
    lambda r, v: f"{v} < len(xs) and xs[{v}] % {(m := r.randint(2, 7))} == {r.randrange(m)}",
    lambda r, v: f"xs.count({v}) == {r.randint(1, 3)}",
    lambda r, v: f"sum(y < {v} for y in xs) == {r.randint(1, 8)}",
    lambda r, v: f"{v} > sum(xs[:{r.randint(2, 5)}])",
)
TEXT_CONDITIONS: tuple[Condition, ...] = (  # on `text`, over the letters a-d
    lambda r, v: f'{v} < len(text) and text[{v}] == "{r.choice("abcd")}"',
    lambda r, v: f'{v} < len(text) and text[{v}] in "{"".join(r.sample("abcd", 2))}"',
    lambda r, v: f"0 < {v} < len(text) and text[{v}] != text[{v} - 1]",
    lambda r, v: f'text[:{v}].count("{r.choice("abcd")}") == {r.randint(1, 6)}',
    lambda r, v: f"0 < {v} and text[:{v}] in text[{v}:]",
)


def _least_answer(f: str) -> int | None:
    """The least natural number f accepts, when it is below `SEARCH_LIMIT` and is neither 0 nor followed
    by another accepted number (so the corpus's corrupted answers, 0 and answer + 1, fail); else None."""
    accepts = defined(f, "f")
    answer = next((n for n in range(SEARCH_LIMIT) if accepts(n)), None)
    return None if answer is None or answer == 0 or accepts(answer + 1) else answer


def _conjunction(
    rng: random.Random, grade: int, constant: str, conditions: tuple[Condition, ...], minimum: int
) -> tuple[str, str]:
    """`f` asks for a number meeting `grade` + 1 conditions: `minimum` of `conditions` (first, as they
    may guard an index), the rest from `NUMBER_CONDITIONS`; `constant` is the line that opens f's body
    ("" for none). Drawn again until a least answer exists."""
    while True:
        v = rng.choice(_ANSWER_NAMES)
        own = [make(rng, v) for make in rng.sample(conditions, minimum)]
        numeric = [make(rng, v) for make in rng.sample(NUMBER_CONDITIONS, grade + 1 - minimum)]
        test = " and ".join(own + numeric)
        opening = f"    {constant}\n" if constant else ""
        f = f"def f({v}: int):\n{opening}    return {test}"
        if _least_answer(f) is not None:
            g = f"def g():\n{opening}    return next({v} for {v} in range(10 ** 6) if {test})"
            return f, g


@family("numbers")
def number_meeting_conditions(rng: random.Random, grade: int) -> tuple[str, str]:
    return _conjunction(rng, grade, "", (), 0)


@family("lists")
def number_meeting_conditions_on_a_list(rng: random.Random, grade: int) -> tuple[str, str]:
    xs = [rng.randint(0, 20 * grade + 20) for _ in range(rng.randint(6, 6 + 4 * grade))]
    return _conjunction(rng, grade, f"xs = {xs}", LIST_CONDITIONS, 1)


@family("strings")
def position_meeting_conditions_in_a_text(rng: random.Random, grade: int) -> tuple[str, str]:
    text = "".join(rng.choice("abcd"[: 2 + grade]) for _ in range(rng.randint(10, 10 + 10 * grade)))
    return _conjunction(rng, grade, f'text = "{text}"', TEXT_CONDITIONS, 1)


FAMILIES = families_in(globals())
