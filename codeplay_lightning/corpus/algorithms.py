"""Algorithms puzzle families."""

from __future__ import annotations

import random

from codeplay_lightning.corpus.family import answer_of, families_in, family


@family("algorithms")
def sorted_list_insertion_index(rng: random.Random, grade: int) -> tuple[str, str]:
    size = (10, 20, 40)[grade - 1] + rng.randint(0, 5)
    xs = sorted(rng.randint(0, 5 * size) for _ in range(size))
    if rng.random() < 0.5:
        target, before, compare = rng.randint(xs[0] + 1, xs[-1]), "<", "<="
    else:
        xs.reverse()
        target, before, compare = rng.randint(xs[-1], xs[0] - 1), ">", ">="
    f = f"""def f(i: int):
    xs = {xs!r}
    return 0 < i < len(xs) and xs[i - 1] {before} {target} {compare} xs[i]"""
    g = f"""def g():
    xs, target = {xs!r}, {target}
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] {before} target:
            lo = mid + 1
        else:
            hi = mid
    return lo"""
    return f, g


def _longest_increasing(xs: list[int]) -> list[int]:
    best = [[x] for x in xs]
    for i, x in enumerate(xs):
        for j in range(i):
            if xs[j] < x and len(best[j]) + 1 > len(best[i]):
                best[i] = best[j] + [x]
    return max(best, key=len)


@family("algorithms")
def longest_strictly_increasing_subsequence(rng: random.Random, grade: int) -> tuple[str, str]:
    size = (8, 14, 22)[grade - 1] + rng.randint(0, 3)
    xs = [rng.randint(0, 3 * size) for _ in range(size)]
    f = f"""def f(sub: List[int]):
    it = iter({xs!r})
    increasing = all(a < b for a, b in zip(sub, sub[1:]))
    return len(sub) == {len(_longest_increasing(xs))} and increasing and all(x in it for x in sub)"""
    g = f"""def g():
    xs = {xs!r}
    best = [[x] for x in xs]  # best[i]: a longest increasing subsequence ending at xs[i]
    for i, x in enumerate(xs):
        for j in range(i):
            if xs[j] < x and len(best[j]) + 1 > len(best[i]):
                best[i] = best[j] + [x]
    return max(best, key=len)"""
    return f, g


@family("algorithms")
def dag_topological_order(rng: random.Random, grade: int) -> tuple[str, str]:
    n = (6, 9, 12)[grade - 1]
    hidden = rng.sample(range(n), n)
    edges = [[hidden[i], hidden[j]] for i in range(n) for j in range(i + 1, n) if rng.random() < 0.35]
    rng.shuffle(edges)
    f = f"""def f(order: List[int]):
    edges = {edges!r}
    return sorted(order) == list(range({n})) and all(order.index(u) < order.index(v) for u, v in edges)"""
    g = f"""def g():
    n, edges = {n}, {edges!r}
    indegree = [0] * n
    for _, v in edges:
        indegree[v] += 1
    order = [u for u in range(n) if indegree[u] == 0]
    for u in order:
        for a, v in edges:
            if a == u:
                indegree[v] -= 1
                if indegree[v] == 0:
                    order.append(v)
    return order"""
    return f, g


def _components(n: int, edges: list[list[int]]) -> int:
    root = list(range(n))

    def find(u: int) -> int:
        while root[u] != u:
            u = root[u]
        return u

    for u, v in edges:
        root[find(u)] = find(v)
    return len({find(u) for u in range(n)})


@family("algorithms")
def connected_component_labels(rng: random.Random, grade: int) -> tuple[str, str]:
    n = (7, 11, 15)[grade - 1]
    while True:
        edges = sorted({tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.randint(n // 2, n - 2))})
        edges = [list(edge) for edge in edges]
        count = _components(n, edges)
        if 2 <= count <= n - 2:
            break
    f = f"""def f(labels: List[int]):
    edges = {edges!r}
    return len(labels) == {n} and len(set(labels)) == {count} and all(labels[u] == labels[v] for u, v in edges)"""
    g = f"""def g():
    n, edges = {n}, {edges!r}
    root = list(range(n))
    def find(u):
        while root[u] != u:
            u = root[u]
        return u
    for u, v in edges:
        root[find(u)] = find(v)
    return [find(u) for u in range(n)]"""
    return f, g


def _merge(intervals: list[list[int]]) -> list[list[int]]:
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


@family("algorithms")
def merged_half_open_intervals(rng: random.Random, grade: int) -> tuple[str, str]:
    count, span = (4, 7, 10)[grade - 1], 20 * grade
    while True:
        intervals = []
        for _ in range(count):
            a = rng.randrange(span)
            intervals.append([a, a + rng.randint(1, span // 4)])
        if len(_merge(intervals)) < count:
            break
    f = f"""def f(merged: List[List[int]]):
    cover = lambda intervals: {{x for a, b in intervals for x in range(a, b)}}
    gaps = all(p[1] < q[0] for p, q in zip(merged, merged[1:]))
    return cover(merged) == cover({intervals!r}) and all(a < b for a, b in merged) and gaps"""
    g = f"""def g():
    intervals = {intervals!r}
    merged = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged"""
    return f, g


def _fewest_coins(coins: list[int], amount: int) -> list[int] | None:
    best: list[list[int] | None] = [[]] + [None] * amount
    for total in range(1, amount + 1):
        options = [best[total - c] + [c] for c in coins if c <= total and best[total - c] is not None]
        best[total] = min(options, key=len, default=None)
    return best[amount]


def _greedy_count(coins: list[int], amount: int) -> int | None:
    used = 0
    for c in sorted(coins, reverse=True):
        used, amount = used + amount // c, amount % c
    return used if amount == 0 else None


@family("algorithms")
def fewest_coins_summing_to_amount(rng: random.Random, grade: int) -> tuple[str, str]:
    while True:
        coins = sorted(rng.sample(range(2, 8 * grade + 9), grade + 2))
        amount = rng.randint((15, 40, 120)[grade - 1], (40, 120, 300)[grade - 1])
        fewest = _fewest_coins(coins, amount)
        # Prefer amounts where taking the largest coin first goes wrong.
        if fewest and (_greedy_count(coins, amount) != len(fewest) or rng.random() < 0.25):
            break
    f = f"""def f(coins: List[int]):
    return sum(coins) == {amount} and len(coins) == {len(fewest)} and all(c in {coins!r} for c in coins)"""
    g = f"""def g():
    coins, amount = {coins!r}, {amount}
    best = [[]] + [None] * amount  # best[t]: fewest coins summing to t
    for total in range(1, amount + 1):
        options = [best[total - c] + [c] for c in coins if c <= total and best[total - c] is not None]
        best[total] = min(options, key=len, default=None)
    return best[amount]"""
    return f, g


@family("algorithms")
def weighted_graph_shortest_path(rng: random.Random, grade: int) -> tuple[str, str]:
    n, heaviest = (6, 9, 12)[grade - 1], 5 * grade + 4
    while True:
        order = rng.sample(range(n), n)
        # A random spanning tree keeps the graph connected; extra edges make detours.
        pairs = {tuple(sorted((order[i], rng.choice(order[:i])))) for i in range(1, n)}
        pairs |= {(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.25}
        weight = {pair: rng.randint(1, heaviest) for pair in sorted(pairs)}
        start, end = rng.sample(range(n), 2)
        g = f"""def g():
    import heapq
    weight, start, end = {weight!r}, {start}, {end}
    graph = {{}}
    for (u, v), w in weight.items():
        graph.setdefault(u, []).append((v, w))
        graph.setdefault(v, []).append((u, w))
    heap, done = [(0, start, [start])], set()
    while heap:
        cost, u, path = heapq.heappop(heap)
        if u == end:
            return path
        if u not in done:
            done.add(u)
            for v, w in graph[u]:
                if v not in done:
                    heapq.heappush(heap, (cost + w, v, path + [v]))"""
        path = answer_of(g)
        if len(path) >= 2 + grade:
            break
    cost = sum(weight[min(u, v), max(u, v)] for u, v in zip(path, path[1:]))
    f = f"""def f(path: List[int]):
    weight = {weight!r}
    cost = sum(weight[min(u, v), max(u, v)] for u, v in zip(path, path[1:]))
    return path[:1] == [{start}] and path[-1:] == [{end}] and cost == {cost}"""
    return f, g


FAMILIES = families_in(globals())
