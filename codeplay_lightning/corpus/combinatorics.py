"""Combinatorics puzzle families."""

from __future__ import annotations

import itertools
import math
import random

from codeplay_lightning.corpus.family import families_in, family

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@family("combinatorics")
def kth_lexicographic_permutation(rng: random.Random, grade: int) -> tuple[str, str]:
    letters = "".join(sorted(rng.sample(_LETTERS, 2 + 2 * grade)))
    k = rng.randrange(1, math.factorial(len(letters)))
    f = f'''def f(p: List[str]):
    from math import factorial
    rank = sum(sum(q < c for q in p[i + 1:]) * factorial(len(p) - 1 - i) for i, c in enumerate(p))
    return sorted(p) == list("{letters}") and rank == {k}'''
    g = f'''def g():
    from math import factorial
    items, k = list("{letters}"), {k}
    p = []
    while items:
        index, k = divmod(k, factorial(len(items) - 1))
        p.append(items.pop(index))
    return p'''
    return f, g


@family("combinatorics")
def combination_from_combinatorial_rank(rng: random.Random, grade: int) -> tuple[str, str]:
    r = grade + 2
    k = rng.randrange(r + 1, 10 ** (grade + 1) * 3)
    f = f"""def f(c: List[int]):
    from math import comb
    rank = sum(comb(x, i + 1) for i, x in enumerate(c))
    return len(c) == {r} and c == sorted(set(c)) and c[0] >= 0 and rank == {k}"""
    g = f"""def g():
    from math import comb
    r, k = {r}, {k}
    c = []
    for i in range(r, 0, -1):
        x = i - 1
        while comb(x + 1, i) <= k:
            x += 1
        c.append(x)
        k -= comb(x, i)
    return c[::-1]"""
    return f, g


def _avoiding(rng: random.Random, p: list[int]) -> list[int]:
    while True:
        q = rng.sample(range(len(p)), len(p))
        if all(x != y for x, y in zip(p, q)):
            return q


@family("combinatorics")
def permutation_avoiding_two_rows(rng: random.Random, grade: int) -> tuple[str, str]:
    n = 3 + 2 * grade
    hidden = rng.sample(range(n), n)
    a, b = _avoiding(rng, hidden), _avoiding(rng, hidden)
    f = f"""def f(p: List[int]):
    a, b = {a}, {b}
    return sorted(p) == list(range({n})) and all(x != y and x != z for x, y, z in zip(p, a, b))"""
    g = f"""def g():
    a, b, n = {a}, {b}, {n}
    def extend(p):
        if len(p) == n:
            return p
        for x in range(n):
            if x not in p and x != a[len(p)] and x != b[len(p)]:
                found = extend(p + [x])
                if found:
                    return found
    return extend([])"""
    return f, g


@family("combinatorics")
def permutation_with_inversion_count(rng: random.Random, grade: int) -> tuple[str, str]:
    n = rng.randint(2 + 2 * grade, 4 + 2 * grade)
    first = rng.randrange(n)
    k = first + rng.randint(0, (n - 1) * (n - 2) // 2)
    f = f"""def f(p: List[int]):
    inversions = sum(a > b for i, a in enumerate(p) for b in p[i + 1:])
    return sorted(p) == list(range({n})) and p[0] == {first} and inversions == {k}"""
    g = f"""def g():
    n, first, k = {n}, {first}, {k}
    items, p = [x for x in range(n) if x != first], [first]
    k -= first
    while items:
        c = min(k, len(items) - 1)
        p.append(items.pop(c))
        k -= c
    return p"""
    return f, g


@family("combinatorics")
def sparse_binary_string_with_fixed_ones(rng: random.Random, grade: int) -> tuple[str, str]:
    n = rng.randint(6 + 4 * grade, 8 + 4 * grade)
    k = rng.randint(2 + grade, (n + 1) // 2)
    # k ones with no two adjacent: choose k of n - k + 1 slots, then spread them out.
    ones = [slot + i for i, slot in enumerate(sorted(rng.sample(range(n - k + 1), k)))]
    fixed = sorted(rng.sample(ones, rng.randint(1, (k + 1) // 2)))
    f = f"""def f(s: str):
    return (len(s) == {n} and set(s) <= {{"0", "1"}} and s.count("1") == {k} and "11" not in s
            and all(s[i] == "1" for i in {fixed}))"""
    g = f"""def g():
    n, k, fixed = {n}, {k}, {fixed}
    s = ["1" if i in fixed else "0" for i in range(n)]
    for i in range(n):
        if s.count("1") < k and "1" not in s[max(i - 1, 0):i + 2]:
            s[i] = "1"
    return "".join(s)"""
    return f, g


@family("combinatorics")
def gray_code_with_given_start(rng: random.Random, grade: int) -> tuple[str, str]:
    n = rng.choice((1 + 2 * grade, 2 + 2 * grade))
    start = rng.randrange(2**n)
    second = start ^ (1 << rng.randrange(n))
    f = f"""def f(c: List[int]):
    steps_ok = all(bin(a ^ b).count("1") == 1 for a, b in zip(c, c[1:]))
    return sorted(c) == list(range({2**n})) and c[:2] == [{start}, {second}] and steps_ok"""
    g = f"""def g():
    n, start, second = {n}, {start}, {second}
    bit = (start ^ second).bit_length() - 1
    def swap(x):  # exchange bits 0 and `bit`, so that the first step flips `bit`
        return x ^ (1 | 1 << bit) if (x & 1) != (x >> bit & 1) else x
    return [start ^ swap(i ^ (i >> 1)) for i in range(2**n)]"""
    return f, g


@family("combinatorics")
def latin_square_with_given_border(rng: random.Random, grade: int) -> tuple[str, str]:
    n = 2 + 2 * grade
    row = rng.sample(range(n), n)
    column = [row[0], *rng.sample(row[1:], n - 1)]
    f = f"""def f(sq: List[List[int]]):
    lines = sq + [list(col) for col in zip(*sq)]
    border = sq[0] == {row} and [r[0] for r in sq] == {column}
    return border and all(sorted(x) == list(range({n})) for x in lines)"""
    g = f"""def g():
    row, column = {row}, {column}
    n = len(row)
    return [[row[(row.index(x) + j) % n] for j in range(n)] for x in column]"""
    return f, g


def _necklaces(letters: str, n: int) -> list[str]:
    words = ("".join(t) for t in itertools.product(letters, repeat=n))
    return [w for w in words if w == min(w[i:] + w[:i] for i in range(n))]


@family("combinatorics")
def necklace_representatives(rng: random.Random, grade: int) -> tuple[str, str]:
    size, n = rng.choice(
        {
            1: [(2, 4), (2, 5), (2, 6), (3, 3)],
            2: [(2, 7), (2, 8), (3, 4), (3, 5), (4, 3)],
            3: [(2, 9), (2, 10), (3, 6), (3, 7), (4, 4), (5, 3)],
        }[grade]
    )
    letters = "".join(sorted(rng.sample(_LETTERS[:12], size)))
    count = len(_necklaces(letters, n))
    f = f'''def f(xs: List[str]):
    canonical = all(len(x) == {n} and set(x) <= set("{letters}") and x == min(x[i:] + x[:i] for i in range({n}))
                    for x in xs)
    return canonical and len(set(xs)) == len(xs) == {count}'''
    g = f'''def g():
    from itertools import product
    letters, n = "{letters}", {n}
    words = ("".join(t) for t in product(letters, repeat=n))
    return [w for w in words if w == min(w[i:] + w[:i] for i in range(n))]'''
    return f, g


@family("combinatorics")
def distinct_parts_partition_with_cap(rng: random.Random, grade: int) -> tuple[str, str]:
    k = grade + 2
    cap = rng.randint(k + 2, k + 3 + 3 * grade)
    smallest, largest = k * (k + 1) // 2, k * (2 * cap - k + 1) // 2
    n = rng.randint(smallest + 1, largest - 1)
    f = f"""def f(p: List[int]):
    return len(p) == len(set(p)) == {k} and sum(p) == {n} and all(1 <= x <= {cap} for x in p)"""
    g = f"""def g():
    n, k, cap = {n}, {k}, {cap}
    parts = []
    while k:
        x = min(cap, n - k * (k - 1) // 2)  # as large as possible, leaving 1..k-1 for the rest
        parts.append(x)
        n, k, cap = n - x, k - 1, x - 1
    return parts"""
    return f, g


def _points_reaching(w: int, h: int, blocked: set[tuple[int, int]]) -> set[tuple[int, int]]:
    reach = {(w, h)}
    for x in range(w, -1, -1):
        for y in range(h, -1, -1):
            if (x, y) not in blocked and ((x + 1, y) in reach or (x, y + 1) in reach):
                reach.add((x, y))
    return reach


@family("combinatorics")
def lattice_path_avoiding_points(rng: random.Random, grade: int) -> tuple[str, str]:
    w, h = rng.randint(2 + 2 * grade, 4 + 2 * grade), rng.randint(2 + grade, 3 + 2 * grade)
    inner = [(x, y) for x in range(w + 1) for y in range(h + 1) if (x, y) not in ((0, 0), (w, h))]
    while True:
        blocked = sorted(rng.sample(inner, rng.randint(2 * grade, 4 * grade)))
        if (0, 0) in _points_reaching(w, h, set(blocked)):
            break
    f = f"""def f(path: str):
    points = {{(path[:i].count("R"), path[:i].count("U")) for i in range(len(path) + 1)}}
    end = (path.count("R"), path.count("U"))
    return set(path) <= {{"R", "U"}} and end == ({w}, {h}) and points.isdisjoint({blocked})"""
    g = f"""def g():
    w, h, blocked = {w}, {h}, {blocked}
    reach = {{(w, h)}}  # the points from which (w, h) can be reached
    for x in range(w, -1, -1):
        for y in range(h, -1, -1):
            if (x, y) not in blocked and ((x + 1, y) in reach or (x, y + 1) in reach):
                reach.add((x, y))
    path, x, y = "", 0, 0
    while (x, y) != (w, h):
        if (x + 1, y) in reach:
            path, x = path + "R", x + 1
        else:
            path, y = path + "U", y + 1
    return path"""
    return f, g


@family("combinatorics")
def anagram_lexicographic_rank(rng: random.Random, grade: int) -> tuple[str, str]:
    letters = rng.sample(_LETTERS[:10], grade + 1)
    word = ""
    while word == "".join(sorted(word)):
        word = "".join(rng.choice(letters) for _ in range(4 + grade))
    f = f'''def f(n: int):
    from itertools import permutations
    return n == sum("".join(p) < "{word}" for p in set(permutations("{word}")))'''
    g = f'''def g():
    from collections import Counter
    from math import factorial
    word = "{word}"
    def arrangements(counts):
        total = factorial(sum(counts.values()))
        for c in counts.values():
            total //= factorial(c)
        return total
    counts, rank = Counter(word), 0
    for ch in word:
        for smaller in sorted(c for c in counts if c < ch and counts[c]):
            counts[smaller] -= 1
            rank += arrangements(counts)
            counts[smaller] += 1
        counts[ch] -= 1
    return rank'''
    return f, g


@family("combinatorics")
def de_bruijn_sequence(rng: random.Random, grade: int) -> tuple[str, str]:
    size, n = rng.choice(
        {
            1: [(2, 2), (2, 3), (3, 2)],
            2: [(2, 4), (2, 5), (3, 3), (4, 2), (5, 2)],
            3: [(2, 6), (2, 7), (3, 4), (4, 3), (6, 2)],
        }[grade]
    )
    letters = "".join(sorted(rng.sample(_LETTERS[:12], size)))
    length = size**n
    f = f'''def f(s: str):
    windows = {{(s + s)[i:i + {n}] for i in range(len(s))}}
    return len(s) == {length} and set(s) <= set("{letters}") and len(windows) == {length}'''
    g = f'''def g():
    letters, n = "{letters}", {n}
    # Prefer-last greedy (Martin): extend with the latest letter whose new window is unseen.
    s = letters[0] * n
    seen = {{s}}
    while len(seen) < len(letters) ** n:
        s += next(c for c in reversed(letters) if s[len(s) - n + 1:] + c not in seen)
        seen.add(s[-n:])
    return s[:len(letters) ** n]'''
    return f, g


FAMILIES = families_in(globals())
