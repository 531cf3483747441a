"""Our own corpus of P3-style puzzles: families of `(f, g)` written for this project, drawn from a seed,
verified in the sandbox and split by family. `codeplay corpus` writes it as P3-format JSON."""

import itertools

from codeplay_lightning.corpus import algorithms, combinatorics, conditions, graphs, lists, numbers, strings
from codeplay_lightning.corpus.build import draw
from codeplay_lightning.corpus.family import Family
from codeplay_lightning.puzzles.puzzle import Puzzle

FAMILIES: list[Family] = [
    *strings.FAMILIES,
    *lists.FAMILIES,
    *numbers.FAMILIES,
    *combinatorics.FAMILIES,
    *graphs.FAMILIES,
    *algorithms.FAMILIES,
    *conditions.FAMILIES,
]
# Held out whole, to measure how far solving generalises beyond the families trained on: about one in
# six, from every topic.
HELDOUT_FAMILIES: set[str] = {
    "reversed_title_words",
    "repeating_unit",
    "kth_occurrence_index",  # strings (the last: see conditions.py)
    "kth_largest_distinct_value",
    "run_length_pairs_of_list",  # lists
    "integer_root_floor",
    "multiple_written_with_two_digits",  # numbers
    "kth_lexicographic_permutation",
    "sparse_binary_string_with_fixed_ones",  # combinatorics
    "grid_maze_moves",  # search
    "sorted_list_insertion_index",  # algorithms
}
REFERENCE_SIZE = 200  # puzzles whose mean pairwise distance normalises novelty (19,900 pairs)


def reference_puzzles(seed: int = 0) -> list[Puzzle]:
    """Novelty's normaliser: `REFERENCE_SIZE` instances of the training families, drawn without the
    sandbox (only their text matters here), the same every time."""
    train = [family for family in FAMILIES if family.name not in HELDOUT_FAMILIES]
    return [
        Puzzle(f"{i.family}:{n}", i.f, (i.g,), i.ans_type)
        for n, i in enumerate(itertools.islice(draw(train, seed), REFERENCE_SIZE))
    ]


__all__ = ["FAMILIES", "HELDOUT_FAMILIES", "Family", "reference_puzzles"]
