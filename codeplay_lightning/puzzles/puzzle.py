"""The `Puzzle` type: a Python Programming Puzzle `f` with optional reference solutions `g`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Puzzle:
    """A puzzle in the prompt format: `f` is the source of `def f(x, ...) -> bool`, each solution the
    source of a `def g()` such that `f(g()) is True`."""

    name: str
    f: str
    solutions: tuple[str, ...] = ()
    ans_type: str | None = None  # e.g. "List[int]"; None means: f's first annotation
    tags: tuple[str, ...] = ()  # labels from the bundled set, e.g. "fewshot"
