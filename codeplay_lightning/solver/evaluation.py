"""How well a Solver solves puzzles: each puzzle gets K few-shot attempts, judged in the sandbox; pass@k is the
unbiased estimator of Chen et al. (2021) from the n = K samples."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.solver.few_shot import FewShotSolver, PuzzleResult


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n passes), when c of the n pass.

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 4), pass_at_k(4, 0, 4)
    (0.25, 1.0, 0.0)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def solver_summary(results: Sequence[PuzzleResult], groups: dict[str, str] | None = None) -> dict:
    """pass@1 and pass@K over the puzzles, and per group (e.g. family) when `groups` maps names to one."""

    def summarise(rows: Sequence[PuzzleResult]) -> dict:
        attempts = rows[0].attempts
        return {
            "puzzles": len(rows),
            "pass@1": sum(pass_at_k(r.attempts, r.passes, 1) for r in rows) / len(rows),
            f"pass@{attempts}": sum(pass_at_k(r.attempts, r.passes, attempts) for r in rows) / len(rows),
        }

    if not results:
        raise ValueError("no puzzles to summarise")
    if len({r.attempts for r in results}) != 1:
        raise ValueError("every puzzle must have the same number of attempts")
    summary = summarise(results)
    if groups:
        by_group: dict[str, list[PuzzleResult]] = defaultdict(list)
        for result in results:
            by_group[groups.get(result.puzzle.name, "")].append(result)
        summary["groups"] = {group: summarise(rows) for group, rows in sorted(by_group.items())}
    return summary


def evaluate_solver(
    puzzles: Sequence[Puzzle],
    solver: FewShotSolver,
    groups: dict[str, str] | None = None,
    on_batch_done: Callable[[int, int], None] | None = None,
) -> tuple[dict, list[dict]]:
    """The Solver's attempts at each puzzle: `solver_summary` and a row per puzzle with every attempt's program
    and verdict."""
    results = solver.solve(puzzles, on_batch_done=on_batch_done)
    rows = [
        {
            "name": r.puzzle.name,
            "group": (groups or {}).get(r.puzzle.name),
            "attempts": r.attempts,
            "passes": r.passes,
            "statuses": dict(Counter(v.status for v in r.verdicts)),
            "tries": [{"g": p.g, "status": v.status, "detail": v.detail} for p, v in zip(r.programs, r.verdicts)],
        }
        for r in results
    ]
    return solver_summary(results, groups), rows
