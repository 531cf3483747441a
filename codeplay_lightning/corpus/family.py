"""A puzzle *family*: a function that writes one puzzle instance `(f, g)` from a random generator and a
difficulty grade. Families are the unit the corpus is split by (train vs held-out families).

Every family follows the prompt format of `puzzles/prompts.py`: `f` takes the answer as its only
argument, annotated with its type, with the instance's constants written into its body as literals;
`g()` takes no argument and computes the answer with a general method whose constants sit at its top,
so a model that has seen the family can solve a new instance by reading the constants off `f`. The
corpus then moves the constants that open f's body into its signature, as P3 does (`signature.py`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

TOPICS = ("strings", "lists", "numbers", "combinatorics", "search", "algorithms")
GRADES = (1, 2, 3)  # 1: small constants, a few steps by hand; 3: large enough that guessing fails

MakeInstance = Callable[[random.Random, int], tuple[str, str]]


@dataclass(frozen=True)
class Family:
    name: str
    topic: str
    make: MakeInstance  # (rng, grade) -> (source of f, source of g)


def family(topic: str) -> Callable[[MakeInstance], Family]:
    """Decorator: the function `make(rng, grade) -> (f, g)` becomes the family named after it."""
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; one of {', '.join(TOPICS)}")

    def wrap(make: MakeInstance) -> Family:
        return Family(make.__name__, topic, make)

    return wrap


def families_in(namespace: dict) -> list[Family]:
    """The families a module defines, in definition order."""
    return [value for value in namespace.values() if isinstance(value, Family)]


def defined(source: str, name: str) -> Callable:
    """The function `name` that a source written in this package defines. Our own code, so it runs
    here, not in the sandbox."""
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - a family's source, written in this package
    return namespace[name]


def answer_of(g: str):
    """What a family's own `g` source returns, for a family that needs its answer to shape `f`."""
    return defined(g, "g")()
