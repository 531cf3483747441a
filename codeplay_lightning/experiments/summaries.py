"""What the comparison says about runs, as numbers: each run's summary and end-of-training samples, each run
against its seed's baseline run, the effects by run over seeds, and self-play's pass rates and evaluations."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import numpy as np

from codeplay_lightning.experiments.runs import PANELS, TrainingRun
from codeplay_lightning.experiments.statistics import (
    between_runs,
    fraction_difference,
    mean_difference,
    paired_mean_and_se,
    slope_and_se,
)
from codeplay_lightning.rewards.functions import pass_rate

LAST = 100  # the "end of training" that the table's distinct count and the samples come from
SAMPLES = 10  # puzzles per run in the appendix, as the paper's appendix C


def sample_last(puzzles: list[dict], seed: int) -> list[dict]:
    """SAMPLES puzzles drawn without replacement from the last LAST (all of them when fewer), in index order."""
    last = puzzles[-LAST:]
    chosen = random.Random(seed).sample(last, min(SAMPLES, len(last)))
    return sorted(chosen, key=lambda puzzle: puzzle["index"])


def summary(run: TrainingRun) -> dict:
    count = len(run.puzzles)
    return {
        "run": str(run.path),
        "label": run.label,
        "puzzles": count,
        "valid_frac": sum(bool(p["valid"]) for p in run.puzzles) / count if count else None,
        "solved_frac": sum(p["D"] is not None for p in run.puzzles) / count if count else None,
        "final": {key: float(run.smoothed(key)[-1]) if count else None for key in PANELS},
        "distinct_last": len({p["puzzle"].strip() for p in run.puzzles[-LAST:]}),
        "notes": list(run.notes),
    }


def baseline_name(runs: list[TrainingRun]) -> str | None:
    """The run that one seed's `runs` are measured against: the unrewarded `none`, else, beside a self-play run whose
    Solver learns, the one whose Solver stays fixed (`selfplay.learn_every` 0); None when there is neither."""
    if any(run.name == "none" for run in runs):
        return "none"
    if not any(run.solver_learns for run in runs):
        return None
    return next((run.name for run in runs if run.solver_fixed), None)


def against_baseline(runs: list[TrainingRun], baseline: str | None) -> list[dict]:
    """The statistics of docs/results/discussion.md, each run against the `baseline` run (the unrewarded preset,
    or self-play's fixed Solver; [] when no run has that name). Iteration 0 is shared by runs of one seed and left
    out of the fractions; R_n is compared at the same archive positions in every run, from the first puzzle after
    the baseline's iteration 0 to the last of the shortest run, and over the second half of that range. A run still
    in its first iteration (nothing valid after it yet) has no row."""
    runs = [run for run in runs if any(p["iteration"] > 0 and p["valid"] for p in run.puzzles)]
    base = next((run for run in runs if run.name == baseline), None)
    if base is None:
        return []
    first = 1 + max(p["index"] for p in base.puzzles if p["iteration"] == 0)
    last = min(run.puzzles[-1]["index"] for run in runs)
    middle = (first + last + 1) // 2

    def later(run: TrainingRun, key: str) -> list[bool]:
        if key == "valid":
            return [bool(p["valid"]) for p in run.puzzles if p["iteration"] > 0]
        return [p["D"] is not None for p in run.puzzles if p["iteration"] > 0 and p["valid"]]

    def novelty(run: TrainingRun, start: int) -> list[float]:
        return [p["R_n"] for p in run.puzzles if start <= p["index"] <= last]

    rows = []
    for run in runs:
        iterations = sorted({p["iteration"] for p in run.puzzles})
        by_iteration = []
        for iteration in iterations:
            valid = [p for p in run.puzzles if p["iteration"] == iteration and p["valid"]]
            by_iteration.append(sum(p["D"] is not None for p in valid) / len(valid) if valid else None)
        row = {"label": run.label, "name": run.name, "baseline": run is base, "solved_by_iteration": by_iteration}
        for key in ("valid", "solved"):
            row[key] = fraction_difference(later(run, key), later(base, key))
        row["R_n"] = mean_difference(novelty(run, first), novelty(base, first))
        row["R_n_second_half"] = mean_difference(novelty(run, middle), novelty(base, middle))
        row["distinct_last"] = len({p["puzzle"].strip() for p in run.puzzles[-LAST:]})
        rows.append(row | {"positions": (first, last, middle)})
    return rows


def by_seed(runs: list[TrainingRun]) -> dict[int | None, list[TrainingRun]]:
    """The runs of each seed, in the order they came."""
    groups: dict[int | None, list[TrainingRun]] = {}
    for run in runs:
        groups.setdefault(run.seed, []).append(run)
    return groups


EFFECTS = {  # the effects reported by run: `against_baseline`'s statistic, and how it is shown (percent or not)
    "valid": ("valid, it. 1+", True),
    "solved": ("solved of valid, it. 1+", True),
    "R_n": ("mean R_n, same positions", False),
}


def effects_by_run(rows_by_seed: dict[int | None, list[dict]]) -> list[dict]:
    """Each run's effect (its statistic minus its own seed's baseline run's) per seed, then over the seeds: a
    reward's effect is a property of the run, so the spread between seeds is its uncertainty; the within-run
    binomial SE of each seed is kept beside it, secondary."""
    cells: dict[tuple, dict] = defaultdict(dict)
    for seed, rows in rows_by_seed.items():
        for row in rows:
            for key, (label, percent) in EFFECTS.items():
                if not row["baseline"]:
                    ours, theirs, se = row[key]
                    cells[row["name"], label, percent][seed] = (ours - theirs, se)
    return over_seeds(cells)


def selfplay_effects_by_run(
    runs_by_seed: dict[int | None, list[TrainingRun]], summaries: dict[str, dict]
) -> list[dict]:
    """Self-play's effects by run. Each learning run's Solver against its own initial Solver: the pass rate 1/D on
    the same puzzles (paired SE within the run), and each evaluation set's pass@k, the last BC phase's minus phase
    0's. And the paper's objective against its seed's fixed-Solver run: the initial Solver's pass-rate trend per 100
    puzzles, the learning run's minus the fixed run's (negative: the Setter's puzzles get harder faster).
    `summaries`: each self-play run's `selfplay_summary`, by its path."""
    cells: dict[tuple, dict] = defaultdict(dict)
    for seed, runs in runs_by_seed.items():
        fixed = next((run for run in runs if run.solver_fixed), None)
        fixed_trend = summaries[str(fixed.path)]["trend"]["initial"] if fixed else None
        for run in (run for run in runs if run.solver_learns):
            found = summaries[str(run.path)]
            if (gap := found["gap"]["whole"]) is not None:
                cells[run.name, "current − initial Solver's pass rate, same puzzles", False][seed] = gap
            for name, keys in found["evaluations"].items():
                for key, (first, last) in keys.items():
                    if first is not None:
                        cells[run.name, f"{name} {key}, last phase − phase 0", True][seed] = (last - first, None)
            trend = found["trend"]["initial"]
            if trend is not None and fixed_trend is not None:
                label = f"initial Solver's trend per 100 puzzles, − {fixed.name}'s"
                cells[run.name, label, False][seed] = (trend[0] - fixed_trend[0], math.hypot(trend[1], fixed_trend[1]))
    return over_seeds(cells)


def by_run(runs: list[TrainingRun], selfplay: list[dict]) -> tuple[dict[int | None, list[dict]], list[dict]]:
    """What the runs say by run: each seed's `against_baseline` rows (seeds with a baseline and another run) and
    the effects over seeds, self-play's too from its runs' `selfplay_summary`s (none: no Solver learned)."""
    seeds = by_seed(runs)
    within = {
        seed: rows for seed, group in seeds.items() if len(rows := against_baseline(group, baseline_name(group))) > 1
    }
    by_path = {row["run"]: row for row in selfplay}
    return within, effects_by_run(within) + (selfplay_effects_by_run(seeds, by_path) if selfplay else [])


def spread_between_seeds(effects: list[dict]) -> bool:
    """Whether some effect was measured over two seeds or more (then it has a between-seed interval to draw)."""
    return any(effect["summary"].se is not None for effect in effects)


def over_seeds(cells: dict[tuple[str, str, bool], dict[int | None, tuple[float, float | None]]]) -> list[dict]:
    """(run name, statistic, percent) -> {seed: (effect, within-run SE or None)}, summarised over the seeds by
    `between_runs`."""
    return [
        {
            "name": name,
            "label": label,
            "percent": percent,
            "seeds": list(per_seed),
            "within_se": [se for _, se in per_seed.values()],
            "summary": between_runs([effect for effect, _ in per_seed.values()]),
        }
        for (name, label, percent), per_seed in cells.items()
    ]


def pass_rates(puzzles: list[dict]) -> tuple[list[int], list[float], list[float]]:
    """The valid puzzles the initial Solver attempted: their `index`, and the pass rate 1/D (0: unsolved) of
    the current Solver and of the initial one."""
    attempted = [p for p in puzzles if p.get("initial_attempted") and p["valid"]]
    return (
        [p["index"] for p in attempted],
        [_pass_rate(p["D"]) for p in attempted],
        [_pass_rate(p["D_initial"]) for p in attempted],
    )


def _pass_rate(difficulty: float | None) -> float:
    """`pass_rate` of a logged D (null: unsolved)."""
    return pass_rate(math.inf if difficulty is None else difficulty)


def evaluation_curves(phases: dict[int, dict[str, dict]]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(evaluation set, "pass@k") -> [(phase, value)], in phase order."""
    curves: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for phase, summaries in phases.items():
        for name, summary in summaries.items():
            for key, value in summary.items():
                if key.startswith("pass@"):
                    curves[name, key].append((phase, value))
    return dict(curves)


def selfplay_summaries(runs: list[TrainingRun]) -> list[dict]:
    """The self-play runs' `selfplay_summary`s when some run's Solver learned; none with fixed Solvers only, whose
    current and initial Solver are one Solver."""
    learned = any(run.solver_learns for run in runs)
    return [selfplay_summary(run) for run in runs if run.selfplay] if learned else []


def selfplay_summary(run: TrainingRun) -> dict:
    """`pass_rate`: the mean over the last LAST puzzles the initial Solver attempted (None: none); `trend`: each
    Solver's pass-rate slope per 100 puzzles generated, with its standard error (the paper's objective: the
    initial Solver's falls, the learning one's holds); `gap`: the current minus the initial Solver's pass rate on
    the same puzzles, mean and standard error, over the first and the second half of them and over all of them;
    `evaluations`: set -> "pass@k" -> (phase 0's, the last phase's)."""
    index, current, initial = pass_rates(run.puzzles)
    per_100 = [position / 100 for position in index]
    gaps = [mine - theirs for mine, theirs in zip(current, initial)]
    half = len(gaps) // 2
    evaluations: dict[str, dict[str, tuple]] = defaultdict(dict)
    for (name, key), points in evaluation_curves(run.phases).items():
        evaluations[name][key] = (dict(points).get(0), points[-1][1])
    return {
        "run": str(run.path),
        "label": run.label,
        "learn_every": run.learn_every,
        "phases": max(run.phases, default=0),
        "attempted": len(current),
        "pass_rate": {
            "current": float(np.mean(current[-LAST:])) if current else None,
            "initial": float(np.mean(initial[-LAST:])) if initial else None,
        },
        "trend": {"current": slope_and_se(per_100, current), "initial": slope_and_se(per_100, initial)},
        "gap": {
            "first_half": paired_mean_and_se(gaps[:half]),
            "second_half": paired_mean_and_se(gaps[half:]),
            "whole": paired_mean_and_se(gaps),
        },
        "evaluations": dict(evaluations),
    }


def memory_goal_gib(run: TrainingRun) -> float:
    """docs/results/speed.md's goal for an iteration's peak resident memory at the CPU scale: 6 GiB for a run that
    trains the Setter alone, 8 GiB for one whose Solver also learns (its BC phases hold a second model's training)."""
    return 8.0 if run.solver_learns else 6.0


def memory_summary(run: TrainingRun) -> dict | None:
    """Each iteration's peak RSS (`peak_rss_gib`) in brief: `first`, `last`, `highest` and its iteration
    `highest_at`, `growth` (the least-squares slope per 10 iterations ± SE; None under 3 iterations), the `goal`
    and how many iterations were `over` it. None when the records give no peak."""
    peaks = [(record["iteration"], record["peak_rss_gib"]) for record in run.iterations if "peak_rss_gib" in record]
    if not peaks:
        return None
    iterations, gib = zip(*peaks)
    highest_at, highest = max(peaks, key=lambda peak: peak[1])
    slope = slope_and_se([iteration / 10 for iteration in iterations], list(gib))
    goal = memory_goal_gib(run)
    return {
        "label": run.label,
        "iterations": len(peaks),
        "first": gib[0],
        "last": gib[-1],
        "highest": highest,
        "highest_at": highest_at,
        "growth": slope,
        "goal": goal,
        "over": sum(peak > goal for peak in gib),
    }
