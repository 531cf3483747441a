"""Pre-registered tests (`codeplay compare --plan FILE`): endpoints written down before the runs, each measured per
seed from the records, tested over the plan's seeds (Student's t, n − 1 degrees of freedom, two-sided) and corrected
by Holm within its family, the uncorrected p beside. The file (`docs/results/plan-50.yaml` is one):

    iterations: 50     # the runs' planned length: a run that finished fewer is left out, with a note
    seeds: [0, 1, 2]   # an endpoint is tested once all of them have run; until then: its values, no test
    baseline: none     # the run of each seed that `against: baseline` subtracts
    families:
      primary:
        - {name: P1, statistic: solved_of_valid, iterations: [1, 49], presets: [difficulty, balanced]}
        - {name: P3, statistic: r_n_same_positions, presets: [difficulty]}
      late-window:
        - {name: L1 difficulty, statistic: mean_r_d_of_valid, iterations: [40, 49], presets: [difficulty],
           against: zero}

An endpoint of several presets tests their within-seed mean (the presets of a seed share its baseline run, so they
are not independent tests). `against: baseline` (the default): each run minus its seed's baseline run; `zero`: the
run's own value. `iterations`: the window, both ends included; `r_n_same_positions` has none: it is the effects
table's mean R_n at the archive positions all runs of a seed share. An endpoint short of some of the plan's seeds
counts in its family's Holm correction as p = 1, so a test over fewer seeds than planned never enters it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from codeplay_lightning.experiments.runs import TrainingRun
from codeplay_lightning.experiments.statistics import RunEffect, between_runs, holm, slope_and_se
from codeplay_lightning.experiments.summaries import against_baseline, by_seed


def _valid(puzzles: list[dict]) -> float | None:
    return sum(bool(p["valid"]) for p in puzzles) / len(puzzles) if puzzles else None


def _solved_of_valid(puzzles: list[dict]) -> float | None:
    valid = [p for p in puzzles if p["valid"]]
    return sum(p["D"] is not None for p in valid) / len(valid) if valid else None


def _mean_r_d_of_valid(puzzles: list[dict]) -> float | None:
    valid = [p["R_d"] for p in puzzles if p["valid"]]
    return sum(valid) / len(valid) if valid else None


def _mean_r_n(puzzles: list[dict]) -> float | None:
    return sum(p["R_n"] for p in puzzles) / len(puzzles) if puzzles else None


def _r_n_slope(puzzles: list[dict]) -> float | None:
    """The least-squares slope of each iteration's mean R_n over the iterations, per iteration."""
    by_iteration: dict[int, list[float]] = {}
    for puzzle in puzzles:
        by_iteration.setdefault(puzzle["iteration"], []).append(puzzle["R_n"])
    iterations = sorted(by_iteration)
    fitted = slope_and_se(iterations, [sum(by_iteration[i]) / len(by_iteration[i]) for i in iterations])
    return None if fitted is None else fitted[0]


WINDOWED = {  # statistic -> (its value over a window's puzzles, whether it is a fraction: shown in points)
    "valid": (_valid, True),
    "solved_of_valid": (_solved_of_valid, True),
    "mean_r_d_of_valid": (_mean_r_d_of_valid, False),
    "mean_r_n": (_mean_r_n, False),
    "r_n_slope": (_r_n_slope, False),
}
SAME_POSITIONS = "r_n_same_positions"


@dataclass(frozen=True)
class Endpoint:
    name: str
    statistic: str
    presets: tuple[str, ...]
    against: str  # "baseline" or "zero"
    window: tuple[int, int] | None  # first and last iteration, both included; None for r_n_same_positions

    @property
    def percent(self) -> bool:
        return self.statistic in WINDOWED and WINDOWED[self.statistic][1]


@dataclass(frozen=True)
class Plan:
    path: Path
    iterations: int
    seeds: tuple[int, ...]
    baseline: str
    families: dict[str, tuple[Endpoint, ...]]


def read_plan(path: Path) -> Plan:
    """`path`'s endpoints; a file that does not say exactly what to test is refused in one line."""
    try:
        found = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise ValueError(f"{path} is not YAML") from None
    if not isinstance(found, dict) or set(found) != {"iterations", "seeds", "baseline", "families"}:
        raise ValueError(f"{path}: give exactly iterations, seeds, baseline and families")
    iterations, seeds, families = found["iterations"], found["seeds"], found["families"]
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"{path}: iterations must be a number of iterations (1 or more), not {iterations!r}")
    if not (
        isinstance(seeds, list)
        and len(seeds) >= 2
        and all(isinstance(s, int) for s in seeds)
        and len(set(seeds)) == len(seeds)
    ):
        raise ValueError(f"{path}: seeds must list two or more distinct seeds (a test needs two), not {seeds!r}")
    if not isinstance(families, dict) or not families:
        raise ValueError(f"{path}: families must map each family's name to its endpoints")
    plan = {name: tuple(_endpoint(path, entry, iterations) for entry in entries) for name, entries in families.items()}
    names = [endpoint.name for endpoints in plan.values() for endpoint in endpoints]
    if len(set(names)) < len(names):
        raise ValueError(f"{path}: an endpoint's name is used twice")
    return Plan(path, iterations, tuple(seeds), str(found["baseline"]), plan)


def _endpoint(path: Path, entry: object, iterations: int) -> Endpoint:
    if not isinstance(entry, dict) or not {"name", "statistic", "presets"} <= set(entry):
        raise ValueError(f"{path}: each endpoint needs a name, a statistic and its presets: {entry!r}")
    unknown = set(entry) - {"name", "statistic", "presets", "against", "iterations"}
    if unknown:
        raise ValueError(f"{path}: endpoint {entry['name']} has unknown keys {sorted(unknown)}")
    statistic, against, window = entry["statistic"], entry.get("against", "baseline"), entry.get("iterations")
    where = f"{path}: endpoint {entry['name']}"
    if statistic not in (*WINDOWED, SAME_POSITIONS):
        raise ValueError(f"{where}: statistic {statistic!r} is none of {', '.join((*WINDOWED, SAME_POSITIONS))}")
    if against not in ("baseline", "zero"):
        raise ValueError(f"{where}: against must be baseline or zero, not {against!r}")
    if statistic == SAME_POSITIONS and (window is not None or against != "baseline"):
        raise ValueError(f"{where}: {SAME_POSITIONS} is against the baseline, over the positions runs share")
    if statistic != SAME_POSITIONS and not (
        isinstance(window, list)
        and len(window) == 2
        and all(isinstance(end, int) for end in window)
        and 0 <= window[0] <= window[1] < iterations
    ):
        raise ValueError(f"{where}: iterations must be [first, last] within 0–{iterations - 1}, not {window!r}")
    presets = entry["presets"]
    if not isinstance(presets, list) or not presets or not all(isinstance(preset, str) for preset in presets):
        raise ValueError(f"{where}: presets must be a list of preset names")
    return Endpoint(str(entry["name"]), statistic, tuple(presets), against, None if window is None else tuple(window))


def measure(endpoint: Endpoint, run: TrainingRun) -> float | None:
    """A windowed endpoint's statistic of one run (None: no puzzle in the window to measure)."""
    first, last = endpoint.window
    return WINDOWED[endpoint.statistic][0]([p for p in run.puzzles if first <= p["iteration"] <= last])


def seed_value(endpoint: Endpoint, named: dict[str, TrainingRun], rows: dict[str, dict], baseline: str) -> float | None:
    """The endpoint in one seed: each preset's value (minus the baseline run's when against it), their mean; None
    when a preset or the baseline has no run to measure in this seed. `named`: the seed's finished runs by name;
    `rows`: their `against_baseline` rows by name."""
    values = []
    for preset in endpoint.presets:
        if preset not in named or (endpoint.against == "baseline" and baseline not in named):
            return None
        if endpoint.statistic == SAME_POSITIONS:
            if preset not in rows:
                return None
            ours, theirs, _ = rows[preset]["R_n"]
            values.append(ours - theirs)
            continue
        value = measure(endpoint, named[preset])
        if value is not None and endpoint.against == "baseline":
            base = measure(endpoint, named[baseline])
            value = None if base is None else value - base
        if value is None:
            return None
        values.append(value)
    return sum(values) / len(values)


def plan_tests(plan: Plan, runs: list[TrainingRun]) -> dict:
    """Each family's endpoints tested over the plan's seeds, from the runs that finished `plan.iterations` (same
    positions: those the finished runs of a seed share): `seeds`, `families` (name -> [{"endpoint", "values" (seed ->
    value), "effect" (RunEffect; no t or p until every seed of the plan has a value), "holm" (its corrected p)}]) and
    `notes` (the runs left out)."""
    notes = []
    for run in runs:
        if len(run.iterations) < plan.iterations:
            notes.append(f"{run.label}: {len(run.iterations)} of {plan.iterations} iterations finished, left out")
        elif run.seed not in plan.seeds:
            notes.append(f"{run.label}: seed {run.seed} is not one of the plan's, left out")
    finished = by_seed([run for run in runs if len(run.iterations) >= plan.iterations and run.seed in plan.seeds])
    seeds = sorted(finished)
    named = {seed: {run.name: run for run in finished[seed]} for seed in seeds}
    rows = {seed: {row["name"]: row for row in against_baseline(finished[seed], plan.baseline)} for seed in seeds}
    families = {}
    for family, endpoints in plan.families.items():
        tested = []
        for endpoint in endpoints:
            values = {}
            for seed in seeds:
                if (value := seed_value(endpoint, named[seed], rows[seed], plan.baseline)) is not None:
                    values[seed] = value
            if len(values) == len(plan.seeds):
                effect = between_runs(list(values.values()))
            else:  # short of the plan's seeds: no test yet, so none enters the family's correction
                mean = sum(values.values()) / len(values) if values else 0.0
                effect = RunEffect(list(values.values()), mean, None, None, None)
            tested.append({"endpoint": endpoint, "values": values, "effect": effect})
        for test, corrected in zip(tested, holm([test["effect"].p for test in tested])):
            test["holm"] = corrected
        families[family] = tested
    return {"plan": plan, "seeds": list(plan.seeds), "families": families, "notes": notes}
