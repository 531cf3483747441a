"""String puzzle families."""

from __future__ import annotations

import random

from codeplay_lightning.corpus.family import families_in, family

_WORDS = ("apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "piano", "lemon", "candle",
          "forest", "silver", "window", "garden", "rocket", "planet", "bridge", "dragon", "marble", "violet")


@family("strings")
def repeated_word(rng: random.Random, grade: int) -> tuple[str, str]:
    word = rng.choice(_WORDS)
    times = rng.randint(2, 3 * grade + 1)
    f = f'''def f(s: str):
    return s == "{word}" * {times}'''
    g = f'''def g():
    word, times = "{word}", {times}
    return word * times'''
    return f, g


@family("strings")
def word_with_letter_counts(rng: random.Random, grade: int) -> tuple[str, str]:
    letters = rng.sample("abcdefghij", grade + 1)
    counts = {letter: rng.randint(1, 2 + grade) for letter in letters}
    conditions = " and ".join(f's.count("{letter}") == {count}' for letter, count in counts.items())
    length = sum(counts.values())
    f = f'''def f(s: str):
    return len(s) == {length} and {conditions}'''
    g = f'''def g():
    counts = {counts!r}
    return "".join(letter * count for letter, count in counts.items())'''
    return f, g


FAMILIES = families_in(globals())
