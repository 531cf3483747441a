"""Our own corpus of P3-style puzzles: families of `(f, g)` written for this project, drawn from a seed,
verified in the sandbox and split by family. `codeplay corpus` writes it as P3-format JSON."""

from codeplay_lightning.corpus import algorithms, combinatorics, lists, numbers, search, strings
from codeplay_lightning.corpus.family import Family

FAMILIES: list[Family] = [*strings.FAMILIES, *lists.FAMILIES, *numbers.FAMILIES, *combinatorics.FAMILIES,
                          *search.FAMILIES, *algorithms.FAMILIES]

__all__ = ["FAMILIES", "Family"]
