"""String puzzle families."""

from __future__ import annotations

import itertools
import random

from codeplay_lightning.corpus.family import families_in, family

_WORDS = (
    "apple",
    "river",
    "stone",
    "cloud",
    "tiger",
    "maple",
    "ocean",
    "piano",
    "lemon",
    "candle",
    "forest",
    "silver",
    "window",
    "garden",
    "rocket",
    "planet",
    "bridge",
    "dragon",
    "marble",
    "violet",
)


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
    f = f"""def f(s: str):
    return len(s) == {length} and {conditions}"""
    g = f"""def g():
    counts = {counts!r}
    return "".join(letter * count for letter, count in counts.items())"""
    return f, g


_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
_MORE_WORDS = (
    "amber",
    "anchor",
    "banana",
    "basket",
    "button",
    "castle",
    "copper",
    "desert",
    "engine",
    "falcon",
    "feather",
    "glacier",
    "harbor",
    "island",
    "jacket",
    "kettle",
    "ladder",
    "magnet",
    "needle",
    "orange",
    "pencil",
    "puzzle",
    "quartz",
    "rabbit",
    "saddle",
    "spider",
    "tunnel",
    "velvet",
    "wizard",
    "zebra",
)
_ALL_WORDS = _WORDS + _MORE_WORDS


def _random_text(rng: random.Random, letters: str, length: int) -> str:
    return "".join(rng.choice(letters) for _ in range(length))


@family("strings")
def substitution_cipher_decode(rng: random.Random, grade: int) -> tuple[str, str]:
    key = "".join(rng.sample(_ALPHABET, 26))
    plain = " ".join(rng.sample(_ALL_WORDS, grade))
    cipher = plain.translate(str.maketrans(_ALPHABET, key))
    f = f'''def f(s: str):
    return s.translate(str.maketrans("{_ALPHABET}", "{key}")) == "{cipher}"'''
    g = f'''def g():
    key, cipher = "{key}", "{cipher}"
    return cipher.translate(str.maketrans(key, "{_ALPHABET}"))'''
    return f, g


@family("strings")
def reversed_title_words(rng: random.Random, grade: int) -> tuple[str, str]:
    words = rng.sample(_ALL_WORDS, grade + 2)
    target = " ".join(word.capitalize() for word in reversed(words))
    f = f'''def f(s: str):
    return s.islower() and " ".join(w.capitalize() for w in reversed(s.split(" "))) == "{target}"'''
    g = f'''def g():
    target = "{target}"
    return " ".join(reversed(target.lower().split(" ")))'''
    return f, g


@family("strings")
def interleaved_strands(rng: random.Random, grade: int) -> tuple[str, str]:
    k = 2 if grade < 3 else 3
    length = rng.randint(3, 3 + 2 * grade)
    strands = [_random_text(rng, _ALPHABET, length) for _ in range(k)]
    f = f"""def f(s: str):
    return [s[i::{k}] for i in range({k})] == {strands!r}"""
    g = f"""def g():
    strands = {strands!r}
    return "".join("".join(chars) for chars in zip(*strands))"""
    return f, g


@family("strings")
def run_length_decode(rng: random.Random, grade: int) -> tuple[str, str]:
    letters = [rng.choice("abcdef")]
    while len(letters) < 2 + 2 * grade:
        letters.append(rng.choice("abcdef".replace(letters[-1], "")))
    code = "".join(f"{letter}{rng.randint(1, 4 * grade + 1)}" for letter in letters)
    f = f'''def f(s: str):
    from itertools import groupby
    return "".join(c + str(len(list(run))) for c, run in groupby(s)) == "{code}"'''
    g = f'''def g():
    import re
    code = "{code}"
    return "".join(c * int(n) for c, n in re.findall(r"(\\D)(\\d+)", code))'''
    return f, g


@family("strings")
def palindrome_with_prefix(rng: random.Random, grade: int) -> tuple[str, str]:
    prefix = rng.choice(_ALL_WORDS)[: rng.randint(3, 4 + grade)]
    inner = "" if grade == 1 else rng.choice(_ALL_WORDS)[: 2 + grade]
    length = 2 * len(prefix) + 2 * len(inner) + rng.randint(0, 2 * grade)
    contains = f' and "{inner}" in s' if inner else ""
    f = f'''def f(s: str):
    return s == s[::-1] and len(s) == {length} and s.startswith("{prefix}"){contains}'''
    g = f'''def g():
    prefix, inner, length = "{prefix}", "{inner}", {length}
    middle = "x" * (length - 2 * len(prefix) - 2 * len(inner))
    return prefix + inner + middle + inner[::-1] + prefix[::-1]'''
    return f, g


@family("strings")
def anagram_without_adjacent_repeats(rng: random.Random, grade: int) -> tuple[str, str]:
    letters = rng.sample("abcdefgh", grade + 1)
    n = rng.randint(2 * grade + 3, 4 * grade + 4)
    given = ""
    # Solvable exactly when no letter needs more than every other slot.
    while not given or max(map(given.count, given)) > (n + 1) // 2:
        given = "".join(sorted(rng.choice(letters) for _ in range(n)))
    f = f'''def f(s: str):
    return sorted(s) == sorted("{given}") and all(a != b for a, b in zip(s, s[1:]))'''
    g = f'''def g():
    from collections import Counter
    given = "{given}"
    counts = Counter(given)
    order = sorted(given, key=lambda c: (-counts[c], c))
    s = [""] * len(given)
    s[::2], s[1::2] = order[: (len(given) + 1) // 2], order[(len(given) + 1) // 2 :]
    return "".join(s)'''
    return f, g


def _lcs(a: str, b: str) -> str:
    best = [[""] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            best[i + 1][j + 1] = best[i][j] + x if x == y else max(best[i][j + 1], best[i + 1][j], key=len)
    return best[-1][-1]


@family("strings")
def longest_common_subsequence(rng: random.Random, grade: int) -> tuple[str, str]:
    letters = "abcd"[: grade + 1]
    a = _random_text(rng, letters, 4 + 3 * grade + rng.randint(0, 2))
    b = _random_text(rng, letters, 4 + 3 * grade + rng.randint(0, 2))
    f = f'''def f(s: str):
    def sub(t):
        it = iter(t)
        return all(c in it for c in s)
    return len(s) == {len(_lcs(a, b))} and sub("{a}") and sub("{b}")'''
    g = f'''def g():
    a, b = "{a}", "{b}"
    best = [[""] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            best[i + 1][j + 1] = best[i][j] + x if x == y else max(best[i][j + 1], best[i + 1][j], key=len)
    return best[-1][-1]'''
    return f, g


@family("strings")
def word_break_segmentation(rng: random.Random, grade: int) -> tuple[str, str]:
    words = [rng.choice(_ALL_WORDS) for _ in range(grade + 1)]
    decoys = {word[: rng.randint(2, len(word) - 1)] for word in rng.sample(_ALL_WORDS, 2 * grade)}
    decoys |= {word[rng.randint(1, len(word) - 2) :] for word in rng.sample(_ALL_WORDS, grade)}
    vocabulary = sorted(set(words) | decoys)
    text = "".join(words)
    f = f'''def f(parts: List[str]):
    return "".join(parts) == "{text}" and all(p in {vocabulary!r} for p in parts)'''
    g = f'''def g():
    text, vocabulary = "{text}", {vocabulary!r}
    ways = {{0: []}}  # prefix length -> a segmentation of that prefix
    for end in range(1, len(text) + 1):
        for word in vocabulary:
            start = end - len(word)
            if start in ways and text[start:end] == word:
                ways[end] = ways[start] + [word]
                break
    return ways[len(text)]'''
    return f, g


_SORT_KEYS = ("w[-1]", "len(w)", "w[::-1]", "w[1]", "sum(c in 'aeiou' for c in w)")


@family("strings")
def sort_words_by_key(rng: random.Random, grade: int) -> tuple[str, str]:
    words = sorted(rng.sample(_ALL_WORDS, 2 + 2 * grade))
    key = rng.choice(_SORT_KEYS)
    f = f"""def f(ws: List[str]):
    key = lambda w: {key}
    return sorted(ws) == {words!r} and all(key(a) <= key(b) for a, b in zip(ws, ws[1:]))"""
    g = f"""def g():
    words = {words!r}
    return sorted(words, key=lambda w: {key})"""
    return f, g


def _superstring(words: list[str]) -> str:
    def merge(a: str, b: str) -> str:
        overlap = max(k for k in range(min(len(a), len(b)) + 1) if a.endswith(b[:k]))
        return a + b[overlap:]

    words = [w for w in words if not any(w != v and w in v for v in words)]
    candidates = []
    for order in itertools.permutations(words):
        s = order[0]
        for w in order[1:]:
            s = merge(s, w)
        candidates.append(s)
    return min(candidates, key=len)


@family("strings")
def shortest_common_superstring(rng: random.Random, grade: int) -> tuple[str, str]:
    base = _random_text(rng, "abc", 8 + 3 * grade)
    pieces: set[str] = set()
    while len(pieces) < grade + 2:
        start = rng.randrange(len(base) - 3)
        pieces.add(base[start : start + rng.randint(3, min(5, len(base) - start))])
    pieces = sorted(pieces)
    f = f"""def f(s: str):
    return len(s) == {len(_superstring(pieces))} and all(p in s for p in {pieces!r})"""
    g = f"""def g():
    import itertools
    pieces = {pieces!r}
    pieces = [p for p in pieces if not any(p != q and p in q for q in pieces)]
    def merge(a, b):
        overlap = max(k for k in range(min(len(a), len(b)) + 1) if a.endswith(b[:k]))
        return a + b[overlap:]
    best = None
    for order in itertools.permutations(pieces):
        s = order[0]
        for p in order[1:]:
            s = merge(s, p)
        if best is None or len(s) < len(best):
            best = s
    return best"""
    return f, g


@family("strings")
def extreme_rotation(rng: random.Random, grade: int) -> tuple[str, str]:
    word = _random_text(rng, "abc"[: grade + 1] if grade > 1 else "ab", 4 + 3 * grade)
    compare, pick = rng.choice((("<=", "min"), (">=", "max")))
    f = f'''def f(s: str):
    w = "{word}"
    rotations = [w[i:] + w[:i] for i in range(len(w))]
    return s in rotations and all(s {compare} r for r in rotations)'''
    g = f'''def g():
    w = "{word}"
    return {pick}(w[i:] + w[:i] for i in range(len(w)))'''
    return f, g


def _has_border(pattern: str) -> bool:
    return any(pattern[:k] == pattern[-k:] for k in range(1, len(pattern)))


@family("strings")
def kth_occurrence_index(rng: random.Random, grade: int) -> tuple[str, str]:
    letters = "ab" if grade == 1 else "abc"
    while True:
        pattern = _random_text(rng, letters, 2 + (grade == 3))
        text = _random_text(rng, letters, 15 + 15 * grade)
        occurrences = text.count(pattern)
        # Border-free patterns cannot overlap, so str.count counts every occurrence.
        if not _has_border(pattern) and occurrences >= 2:
            break
    k = rng.randint(2, occurrences)
    f = f'''def f(i: int):
    text = "{text}"
    return i >= 0 and text.startswith("{pattern}", i) and text.count("{pattern}", 0, i) == {k - 1}'''
    g = f'''def g():
    text, pattern, k = "{text}", "{pattern}", {k}
    i = -1
    for _ in range(k):
        i = text.index(pattern, i + 1)
    return i'''
    return f, g


@family("strings")
def longest_palindromic_substring(rng: random.Random, grade: int) -> tuple[str, str]:
    text = _random_text(rng, "abc", 8 + 6 * grade)
    longest = max(
        (text[i:j] for i in range(len(text)) for j in range(i + 1, len(text) + 1) if text[i:j] == text[i:j][::-1]),
        key=len,
    )
    f = f'''def f(s: str):
    return len(s) == {len(longest)} and s == s[::-1] and s in "{text}"'''
    g = f'''def g():
    text = "{text}"
    subs = (text[i:j] for i in range(len(text)) for j in range(i + 1, len(text) + 1))
    return max((s for s in subs if s == s[::-1]), key=len)'''
    return f, g


@family("strings")
def repeating_unit(rng: random.Random, grade: int) -> tuple[str, str]:
    unit = _random_text(rng, _ALPHABET[: 2 + grade], rng.randint(2, 2 + 2 * grade))
    text = unit * rng.randint(2, 2 + grade)
    f = f'''def f(s: str):
    t = "{text}"
    return 0 < len(s) < len(t) and s * (len(t) // len(s)) == t'''
    g = f'''def g():
    t = "{text}"
    return next(t[:p] for p in range(1, len(t)) if t[:p] * (len(t) // p) == t)'''
    return f, g


FAMILIES = families_in(globals())
