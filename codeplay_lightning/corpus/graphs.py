"""Search puzzle families over graphs, grids and boards: mazes, paths, queens, independent sets, ladders."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

from codeplay_lightning.corpus.family import families_in, family

_MAZE_STEPS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_KNIGHT_JUMPS = [(dr, dc) for dr in (-2, -1, 1, 2) for dc in (-2, -1, 1, 2) if abs(dr) != abs(dc)]


def _maze_moves(maze: list[str], start: tuple[int, int]) -> dict[tuple[int, int], str]:
    """Breadth-first search: every reachable cell and a shortest move string to it."""
    moves, queue = {start: ""}, [start]
    for r, c in queue:
        for m, (dr, dc) in _MAZE_STEPS.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < len(maze) and 0 <= nc < len(maze[0]) and maze[nr][nc] != "#" and (nr, nc) not in moves:
                moves[nr, nc] = moves[r, c] + m
                queue.append((nr, nc))
    return moves


@family("search")
def grid_maze_moves(rng: random.Random, grade: int) -> tuple[str, str]:
    h, w = 3 + 2 * grade, rng.randint(3 + 2 * grade, 5 + 2 * grade)
    while True:
        maze = ["".join("#" if rng.random() < 0.35 else "." for _ in range(w)) for _ in range(h)]
        start = rng.choice([(r, c) for r in range(h) for c in range(w) if maze[r][c] == "."])
        moves = _maze_moves(maze, start)
        far = [cell for cell, path in moves.items() if len(path) >= 2 + 3 * grade]
        # Prefer ends whose shortest route detours around walls.
        detours = [(r, c) for r, c in far if len(moves[r, c]) > abs(r - start[0]) + abs(c - start[1])]
        if far:
            end = rng.choice(detours or far)
            break
    f = f"""def f(moves: str):
    maze = {maze!r}
    r, c = {start}
    for m in moves:
        r, c = r + (m == "D") - (m == "U"), c + (m == "R") - (m == "L")
        if m not in "UDLR" or not (0 <= r < len(maze) and 0 <= c < len(maze[0])) or maze[r][c] == "#":
            return False
    return (r, c) == {end} and len(moves) <= {len(moves[end])}"""
    g = f"""def g():
    maze, start, end = {maze!r}, {start}, {end}
    steps = {_MAZE_STEPS!r}
    moves, queue = {{start: ""}}, [start]
    for r, c in queue:
        for m, (dr, dc) in steps.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < len(maze) and 0 <= nc < len(maze[0]) and maze[nr][nc] != "#" and (nr, nc) not in moves:
                moves[nr, nc] = moves[r, c] + m
                queue.append((nr, nc))
    return moves[end]"""
    return f, g


def _simple_path_lengths(edges: list[list[int]], start: int, end: int) -> set[int]:
    adjacent = defaultdict(list)
    for u, v in edges:
        adjacent[u].append(v)
        adjacent[v].append(u)
    lengths = set()

    def walk(node: int, seen: set[int]) -> None:
        if node == end:
            lengths.add(len(seen) - 1)
            return
        for nxt in adjacent[node]:
            if nxt not in seen:
                walk(nxt, seen | {nxt})

    walk(start, {start})
    return lengths


@family("search")
def graph_simple_path_of_length(rng: random.Random, grade: int) -> tuple[str, str]:
    n, p = 4 + 2 * grade, (0.45, 0.35, 0.3)[grade - 1]
    while True:
        edges = [[u, v] for u in range(n) for v in range(u + 1, n) if rng.random() < p]
        start, end = rng.sample(range(n), 2)
        lengths = _simple_path_lengths(edges, start, end)
        longer = [k for k in lengths if k >= 3 and k > min(lengths)]
        if longer:
            break
    length = rng.choice(longer)
    f = f"""def f(path: List[int]):
    edges = {edges!r}
    hops = all([u, v] in edges or [v, u] in edges for u, v in zip(path, path[1:]))
    return len(set(path)) == len(path) == {length + 1} and path[0] == {start} and path[-1] == {end} and hops"""
    g = f"""def g():
    from collections import defaultdict
    edges, start, end, length = {edges!r}, {start}, {end}, {length}
    adjacent = defaultdict(list)
    for u, v in edges:
        adjacent[u].append(v)
        adjacent[v].append(u)
    def extend(path):
        if len(path) == length + 1:
            return path if path[-1] == end else None
        for nxt in adjacent[path[-1]]:
            if nxt not in path and (found := extend(path + [nxt])):
                return found
        return None
    return extend([start])"""
    return f, g


def _random_queens(rng: random.Random, n: int) -> list[int]:
    def place(cols: list[int]) -> list[int] | None:
        if len(cols) == n:
            return cols
        for c in rng.sample(range(n), n):
            if all(c != d and abs(c - d) != len(cols) - r for r, d in enumerate(cols)):
                if found := place(cols + [c]):
                    return found
        return None

    return place([])


@family("search")
def n_queens_with_given_queens(rng: random.Random, grade: int) -> tuple[str, str]:
    n = rng.randint(*((5, 7), (8, 9), (10, 12))[grade - 1])
    solution = _random_queens(rng, n)
    fixed = {r: solution[r] for r in sorted(rng.sample(range(n), 1 if grade < 3 else 2))}
    conditions = " and ".join(f"cols[{r}] == {c}" for r, c in fixed.items())
    f = f"""def f(cols: List[int]):
    n = {n}
    diagonals = len({{i + c for i, c in enumerate(cols)}}) == len({{i - c for i, c in enumerate(cols)}}) == n
    return sorted(cols) == list(range(n)) and diagonals and {conditions}"""
    g = f"""def g():
    n, fixed = {n}, {fixed!r}
    def place(cols):
        row = len(cols)
        if row == n:
            return cols
        for c in [fixed[row]] if row in fixed else range(n):
            queens = [(r, d) for r, d in [*enumerate(cols), *fixed.items()] if r != row]
            if all(c != d and abs(c - d) != abs(row - r) for r, d in queens) and (found := place(cols + [c])):
                return found
        return None
    return place([])"""
    return f, g


def _independent(nodes: tuple[int, ...], edges: list[list[int]]) -> bool:
    return all(u not in nodes or v not in nodes for u, v in edges)


@family("search")
def largest_independent_set(rng: random.Random, grade: int) -> tuple[str, str]:
    n = 4 + 3 * grade
    edges = [[u, v] for u in range(n) for v in range(u + 1, n) if rng.random() < 0.35]
    size = next(
        k for k in range(n, 0, -1) if any(_independent(nodes, edges) for nodes in itertools.combinations(range(n), k))
    )
    f = f"""def f(nodes: List[int]):
    edges = {edges!r}
    independent = all(u not in nodes or v not in nodes for u, v in edges)
    return len(set(nodes)) == {size} and all(0 <= v < {n} for v in nodes) and independent"""
    g = f"""def g():
    from itertools import combinations
    n, edges = {n}, {edges!r}
    for size in range(n, 0, -1):
        for nodes in combinations(range(n), size):
            if all(u not in nodes or v not in nodes for u, v in edges):
                return list(nodes)"""
    return f, g


@family("search")
def bounded_integer_linear_system(rng: random.Random, grade: int) -> tuple[str, str]:
    n, bound = grade + 1, (9, 6, 5)[grade - 1]
    hidden = [rng.randint(-bound, bound) for _ in range(n)]
    system = []
    for _ in range(grade):
        row = [rng.choice([a for a in range(-6, 7) if a]) for _ in range(n)]
        system.append((row, sum(a * x for a, x in zip(row, hidden))))
    f = f"""def f(x: List[int]):
    system = {system!r}
    solves = all(sum(a * v for a, v in zip(row, x)) == b for row, b in system)
    return len(x) == {n} and all(abs(v) <= {bound} for v in x) and solves"""
    g = f"""def g():
    from itertools import product
    system, n, bound = {system!r}, {n}, {bound}
    for x in product(range(-bound, bound + 1), repeat=n):
        if all(sum(a * v for a, v in zip(row, x)) == b for row, b in system):
            return list(x)"""
    return f, g


def _ladder_parents(words: list[str], start: str) -> dict[str, str | None]:
    parent, queue = {start: None}, [start]
    for word in queue:
        for other in words:
            if other not in parent and sum(a != b for a, b in zip(word, other)) == 1:
                parent[other] = word
                queue.append(other)
    return parent


@family("search")
def word_ladder_shortest(rng: random.Random, grade: int) -> tuple[str, str]:
    letters, length, count = (("abcd", 3, 14), ("abcde", 3, 24), ("abcd", 4, 36))[grade - 1]
    while True:
        words = sorted(rng.sample(["".join(p) for p in itertools.product(letters, repeat=length)], count))
        start = rng.choice(words)
        parent = _ladder_parents(words, start)
        far = [w for w in parent if w != start]
        ladders = {}
        for word in far:
            ladder = [word]
            while parent[ladder[-1]] is not None:
                ladder.append(parent[ladder[-1]])
            ladders[word] = ladder[::-1]
        far = [w for w, ladder in ladders.items() if len(ladder) >= 3 + grade]
        if far:
            end = rng.choice(far)
            break
    f = f'''def f(ladder: List[str]):
    words = {words!r}
    steps = all(sum(a != b for a, b in zip(u, v)) == 1 for u, v in zip(ladder, ladder[1:]))
    ends = ladder[:1] == ["{start}"] and ladder[-1:] == ["{end}"]
    return len(ladder) == {len(ladders[end])} and ends and all(w in words for w in ladder) and steps'''
    g = f'''def g():
    words, start, end = {words!r}, "{start}", "{end}"
    parent, queue = {{start: None}}, [start]
    for word in queue:
        for other in words:
            if other not in parent and sum(a != b for a, b in zip(word, other)) == 1:
                parent[other] = word
                queue.append(other)
    ladder = [end]
    while parent[ladder[-1]] is not None:
        ladder.append(parent[ladder[-1]])
    return ladder[::-1]'''
    return f, g


def _knight_paths(n: int, blocked: list[list[int]], start: list[int]) -> dict[tuple[int, int], list[list[int]]]:
    paths, queue = {tuple(start): [start]}, [tuple(start)]
    for r, c in queue:
        for dr, dc in _KNIGHT_JUMPS:
            nr, nc = r + dr, c + dc
            if 0 <= nr < n and 0 <= nc < n and [nr, nc] not in blocked and (nr, nc) not in paths:
                paths[nr, nc] = paths[r, c] + [[nr, nc]]
                queue.append((nr, nc))
    return paths


@family("search")
def knight_path_around_blocks(rng: random.Random, grade: int) -> tuple[str, str]:
    n = (5, 6, 8)[grade - 1]
    while True:
        blocked = [[r, c] for r in range(n) for c in range(n) if rng.random() < 0.2]
        start = rng.choice([[r, c] for r in range(n) for c in range(n) if [r, c] not in blocked])
        paths = _knight_paths(n, blocked, start)
        far = [cell for cell, path in paths.items() if len(path) >= 3 + grade]
        if far:
            end = list(rng.choice(far))
            break
    f = f"""def f(path: List[List[int]]):
    blocked = {blocked!r}
    inside = all(0 <= r < {n} and 0 <= c < {n} and [r, c] not in blocked for r, c in path)
    jumps = all(sorted([abs(a - c), abs(b - d)]) == [1, 2] for (a, b), (c, d) in zip(path, path[1:]))
    return len(path) == {len(paths[tuple(end)])} and path[0] == {start} and path[-1] == {end} and inside and jumps"""
    g = f"""def g():
    n, blocked, start, end = {n}, {blocked!r}, {start}, {end}
    jumps = [(dr, dc) for dr in (-2, -1, 1, 2) for dc in (-2, -1, 1, 2) if abs(dr) != abs(dc)]
    paths, queue = {{tuple(start): [start]}}, [tuple(start)]
    for r, c in queue:
        for dr, dc in jumps:
            nr, nc = r + dr, c + dc
            if 0 <= nr < n and 0 <= nc < n and [nr, nc] not in blocked and (nr, nc) not in paths:
                paths[nr, nc] = paths[r, c] + [[nr, nc]]
                queue.append((nr, nc))
    return paths[tuple(end)]"""
    return f, g


FAMILIES = families_in(globals())
