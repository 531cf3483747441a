"""Lists puzzle families."""

from __future__ import annotations

import random

from codeplay_lightning.corpus.family import families_in, family

_WORDS = (
    "ant",
    "bee",
    "cat",
    "dog",
    "eel",
    "fox",
    "gnu",
    "hen",
    "ibis",
    "jay",
    "koi",
    "lynx",
    "mole",
    "newt",
    "owl",
    "puma",
    "quail",
    "ram",
    "seal",
    "toad",
    "vole",
    "wren",
    "yak",
    "zebu",
)


def _random_ints(rng: random.Random, n: int, lo: int, hi: int) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


@family("lists")
def list_rotation_offset(rng: random.Random, grade: int) -> tuple[str, str]:
    while True:
        xs = _random_ints(rng, 5 + 3 * grade, 1, 3 + 3 * grade)
        if len({tuple(xs[k:] + xs[:k]) for k in range(len(xs))}) == len(xs):  # every rotation distinct
            break
    k = rng.randrange(1, len(xs))
    target = xs[k:] + xs[:k]
    f = f"""def f(k: int):
    xs = {xs}
    return 0 <= k < len(xs) and xs[k:] + xs[:k] == {target}"""
    g = f"""def g():
    xs, target = {xs}, {target}
    return next(k for k in range(len(xs)) if xs[k:] + xs[:k] == target)"""
    return f, g


@family("lists")
def floats_from_adjacent_midpoints(rng: random.Random, grade: int) -> tuple[str, str]:
    step = 2 if grade < 3 else 4  # halves or quarters: every midpoint is exact in binary
    xs = [rng.randint(-10 * grade * step, 10 * grade * step) / step for _ in range(3 + 2 * grade)]
    mids = [(a + b) / 2 for a, b in zip(xs, xs[1:])]
    f = f"""def f(xs: List[float]):
    return xs[:1] == [{xs[0]}] and [(a + b) / 2 for a, b in zip(xs, xs[1:])] == {mids}"""
    g = f"""def g():
    first, mids = {xs[0]}, {mids}
    xs = [first]
    for m in mids:
        xs.append(2 * m - xs[-1])
    return xs"""
    return f, g


@family("lists")
def distinct_positives_with_sum_and_cap(rng: random.Random, grade: int) -> tuple[str, str]:
    n = rng.randint(grade + 2, 2 * grade + 3)
    cap = n + rng.randint(2, 6 * grade)
    least, most = n * (n + 1) // 2, sum(range(cap - n + 1, cap + 1))
    total = rng.randint(least + 1, most - 1)
    f = f"""def f(xs: List[int]):
    return len(set(xs)) == len(xs) == {n} and sum(xs) == {total} and all(1 <= x <= {cap} for x in xs)"""
    g = f"""def g():
    n, total, cap = {n}, {total}, {cap}
    xs = list(range(1, n + 1))
    extra = total - sum(xs)
    for i in reversed(range(n)):
        raise_by = min(extra, cap - (n - 1 - i) - xs[i])
        xs[i] += raise_by
        extra -= raise_by
    return xs"""
    return f, g


@family("lists")
def indices_of_local_peaks(rng: random.Random, grade: int) -> tuple[str, str]:
    while True:
        xs = _random_ints(rng, 8 + 6 * grade, 1, 9)
        peaks = [i for i in range(1, len(xs) - 1) if xs[i - 1] < xs[i] > xs[i + 1]]
        if peaks:
            break
    f = f"""def f(ix: List[int]):
    xs = {xs}
    is_peak = lambda i: 0 < i < len(xs) - 1 and xs[i - 1] < xs[i] > xs[i + 1]
    return len(set(ix)) == len(ix) == {len(peaks)} and all(is_peak(i) for i in ix)"""
    g = f"""def g():
    xs = {xs}
    return [i for i in range(1, len(xs) - 1) if xs[i - 1] < xs[i] > xs[i + 1]]"""
    return f, g


@family("lists")
def matrix_with_row_and_column_sums(rng: random.Random, grade: int) -> tuple[str, str]:
    height, width = rng.randint(2, grade + 2), rng.randint(2, grade + 3)
    m = [_random_ints(rng, width, 0, 3 + 3 * grade) for _ in range(height)]
    rows, cols = [sum(r) for r in m], [sum(c) for c in zip(*m)]
    f = f"""def f(m: List[List[int]]):
    nonnegative = all(x >= 0 for r in m for x in r)
    return nonnegative and [sum(r) for r in m] == {rows} and [sum(c) for c in zip(*m)] == {cols}"""
    g = f"""def g():
    rows, cols = {rows}, {cols}
    m = [[0] * len(cols) for _ in rows]
    for i in range(len(rows)):
        for j in range(len(cols)):
            m[i][j] = min(rows[i], cols[j])
            rows[i] -= m[i][j]
            cols[j] -= m[i][j]
    return m"""
    return f, g


@family("lists")
def word_grid_before_quarter_turn(rng: random.Random, grade: int) -> tuple[str, str]:
    height, width = rng.randint(2, grade + 2), rng.randint(2, grade + 3)
    grid = ["".join(rng.choice("abcdefghij") for _ in range(width)) for _ in range(height)]
    # A clockwise turn reads the columns bottom to top; a counterclockwise one reads them right to left.
    if grade == 1 or rng.random() < 0.5:
        target = ["".join(t) for t in zip(*grid[::-1])]
        turn, undo = '["".join(t) for t in zip(*grid[::-1])]', '["".join(t) for t in zip(*target)][::-1]'
    else:
        target = ["".join(t) for t in zip(*grid)][::-1]
        turn, undo = '["".join(t) for t in zip(*grid)][::-1]', '["".join(t) for t in zip(*target[::-1])]'
    f = f"""def f(grid: List[str]):
    return {turn} == {target}"""
    g = f"""def g():
    target = {target}
    return {undo}"""
    return f, g


@family("lists")
def distinct_words_by_occurrence(rng: random.Random, grade: int) -> tuple[str, str]:
    pool = rng.sample(_WORDS, grade + 3)
    given = [rng.choice(pool) for _ in range(6 + 4 * grade)]
    if grade == 1 or rng.random() < 0.5:
        which, positions = "first", "{w: i for i, w in reversed(list(enumerate(given)))}"
    else:
        which, positions = "last", "{w: i for i, w in enumerate(given)}"
    f = f"""def f(ws: List[str]):
    given = {given}
    {which} = {positions}
    return sorted(ws) == sorted({which}) and all({which}[a] < {which}[b] for a, b in zip(ws, ws[1:]))"""
    g = f"""def g():
    given = {given}
    {which} = {positions}
    return sorted({which}, key={which}.get)"""
    return f, g


@family("lists")
def equal_sum_chunk_cuts(rng: random.Random, grade: int) -> tuple[str, str]:
    chunks, share = grade + 1, rng.randint(8, 8 + 8 * grade)
    xs = []
    for _ in range(chunks):
        rest = share
        while rest:
            xs.append(rng.randint(1, min(9, rest)))
            rest -= xs[-1]
    f = f"""def f(cuts: List[int]):
    xs = {xs}
    bounds = [0] + cuts + [len(xs)]
    sums = {{sum(xs[a:b]) for a, b in zip(bounds, bounds[1:])}}
    return len(cuts) == {chunks - 1} and bounds == sorted(bounds) and len(sums) == 1"""
    g = f"""def g():
    xs, chunks = {xs}, {chunks}
    share, running, cuts = sum(xs) // chunks, 0, []
    for i, x in enumerate(xs[:-1]):
        running += x
        if running == share * (len(cuts) + 1):
            cuts.append(i + 1)
    return cuts"""
    return f, g


@family("lists")
def kth_largest_distinct_value(rng: random.Random, grade: int) -> tuple[str, str]:
    while True:
        xs = _random_ints(rng, 6 + 4 * grade, 1, 10 + 20 * grade)
        if len(set(xs)) >= grade + 2:
            break
    k = rng.randint(2, grade + 2)
    f = f"""def f(x: int):
    xs = {xs}
    return x in xs and len({{y for y in xs if y > x}}) == {k - 1}"""
    g = f"""def g():
    xs, k = {xs}, {k}
    return sorted(set(xs), reverse=True)[k - 1]"""
    return f, g


@family("lists")
def wiggle_permutation(rng: random.Random, grade: int) -> tuple[str, str]:
    given = rng.sample(range(1, 20 * grade + 10), 4 + 2 * grade + rng.randint(0, 1))
    up_first = grade == 1 or rng.random() < 0.5
    f = f"""def f(xs: List[int]):
    wiggles = all((a < b) == (i % 2 == {0 if up_first else 1}) for i, (a, b) in enumerate(zip(xs, xs[1:])))
    return wiggles and sorted(xs) == sorted({given})"""
    g = f"""def g():
    given, up_first = {given}, {up_first}
    xs = sorted(given)
    for i in range(1 if up_first else 0, len(xs) - 1, 2):
        xs[i], xs[i + 1] = xs[i + 1], xs[i]
    return xs"""
    return f, g


@family("lists")
def run_length_pairs_of_list(rng: random.Random, grade: int) -> tuple[str, str]:
    values = [rng.randint(0, 9)]
    while len(values) < 3 + 2 * grade:
        values.append(rng.choice([v for v in range(10) if v != values[-1]]))
    xs = [v for v in values for _ in range(rng.randint(1, 2 + grade))]
    f = f"""def f(runs: List[List[int]]):
    distinct_neighbours = all(a[0] != b[0] for a, b in zip(runs, runs[1:]))
    return distinct_neighbours and [v for v, c in runs for _ in range(c)] == {xs}"""
    g = f"""def g():
    from itertools import groupby
    xs = {xs}
    return [[v, len(list(run))] for v, run in groupby(xs)]"""
    return f, g


@family("lists")
def circular_tour_start(rng: random.Random, grade: int) -> tuple[str, str]:
    n = 5 + 3 * grade
    while True:
        gains = _random_ints(rng, n, -9, 9)
        starts = [i for i in range(n) if all(sum(gains[(i + j) % n] for j in range(k)) >= 0 for k in range(1, n + 1))]
        if len(starts) == 1 and starts[0] != 0:
            break
    f = f"""def f(i: int):
    gains = {gains}
    n = len(gains)
    return 0 <= i < n and all(sum(gains[(i + j) % n] for j in range(k)) >= 0 for k in range(1, n + 1))"""
    g = f"""def g():
    gains = {gains}
    start, tank = 0, 0
    for i, gain in enumerate(gains):
        tank += gain
        if tank < 0:
            start, tank = i + 1, 0
    return start"""
    return f, g


@family("lists")
def max_sum_nonadjacent_indices(rng: random.Random, grade: int) -> tuple[str, str]:
    xs = _random_ints(rng, 5 + 4 * grade, 1, 5 + 5 * grade)
    best = (0, 0)  # best sums of xs[:i - 1] and xs[:i] with no two chosen neighbours
    for x in xs:
        best = (best[1], max(best[1], best[0] + x))
    f = f"""def f(ix: List[int]):
    xs = {xs}
    apart = all(b - a >= 2 for a, b in zip(ix, ix[1:]))
    return apart and all(0 <= i < len(xs) for i in ix) and sum(xs[i] for i in ix) == {best[1]}"""
    g = f"""def g():
    xs = {xs}
    before, last = (0, []), (0, [])  # best (sum, indices) for xs[:i - 1] and for xs[:i]
    for i, x in enumerate(xs):
        taken = (before[0] + x, before[1] + [i])
        before, last = last, max(last, taken, key=lambda best: best[0])
    return last[1]"""
    return f, g


@family("lists")
def adjacent_swaps_to_sort(rng: random.Random, grade: int) -> tuple[str, str]:
    while True:
        xs = rng.sample(range(1, 50), 4 + 2 * grade)
        inversions = sum(a > b for i, a in enumerate(xs) for b in xs[i + 1 :])
        if inversions:
            break
    f = f"""def f(swaps: List[int]):
    xs = {xs}
    for i in swaps:
        xs[i], xs[i + 1] = xs[i + 1], xs[i]
    return len(swaps) == {inversions} and xs == sorted(xs)"""
    g = f"""def g():
    xs, swaps = {xs}, []
    for end in range(len(xs) - 1, 0, -1):
        for i in range(end):
            if xs[i] > xs[i + 1]:
                xs[i], xs[i + 1] = xs[i + 1], xs[i]
                swaps.append(i)
    return swaps"""
    return f, g


FAMILIES = families_in(globals())
