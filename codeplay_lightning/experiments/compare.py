"""`compare(run_dirs, out)`: the paper's figure 2 and appendix C from training runs' `puzzles.jsonl`.

    compare([Path("runs/balanced/version_0"), Path("runs/none/version_0")], Path("docs/results"))

Writes `figure.png` (R_d, R_n and R against the number of puzzles generated, each a trailing mean
over the last 200 puzzles, one line per run) and `report.md` (a summary table, then 10 puzzles per
run sampled without replacement from its last 100). A resumed run may have logged some puzzles of
its interrupted iteration twice: each `index` counts once, its last occurrence kept. A run still
training is read as far as it got; a line cut short by a crash is skipped with a note.

When a run's Solver learned (`selfplay.learn_every` > 0), the self-play runs (their records say which puzzles
the initial, frozen Solver also attempted; a fixed Solver's too) add `selfplay.png` and a "Self-play" section:
the pass rate 1/D of the current and of the initial Solver on those puzzles, each evaluation set's pass@1 and
pass@K over BC phases (`solver.jsonl`; phase 0 is the initial Solver), and R_n. With fixed Solvers only, as in
the preset sweep, current and initial are one Solver: no section.
Runs from before self-play are reported as they always were.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from codeplay_lightning.experiments.statistics import between_runs, mean_and_se
from codeplay_lightning.rewards.functions import pass_rate

WINDOW = 200  # puzzles in the trailing mean, as the paper's curves
LAST = 100  # the "end of training" that the table's distinct count and the samples come from
SAMPLES = 10  # puzzles per run in the appendix, as the paper's appendix C
PANELS = {"R_d": "difficulty reward $R_d$", "R_n": "novelty reward $R_n$", "R": "total reward $R$"}
FIELDS = ("index", "puzzle", "valid", "D", "R_d", "R_n", "R")
# the paper's figure 2 colours for its presets; other runs take matplotlib's cycle
COLOURS = {
    "none": "grey",
    "difficulty": "orchid",
    "novelty": "darkorange",
    "balanced": "purple",
    "novelty_biased": "royalblue",
    "product": "seagreen",
}
MARKERS = ("o", "s", "^", "D")  # one per evaluation set in selfplay.png


@dataclass
class Run:
    path: Path
    name: str
    label: str
    puzzles: list[dict]  # in `index` order, each index once
    notes: list[str] = field(default_factory=list)
    phases: dict[int, dict[str, dict]] = field(default_factory=dict)  # solver.jsonl's evaluations by BC phase
    learn_every: int | None = None  # selfplay.learn_every (0: a fixed Solver); None: not in config.yaml
    seed: int | None = None  # trainer.seed; None: not in config.yaml

    def smoothed(self, key: str) -> np.ndarray:
        return trailing_mean([puzzle[key] for puzzle in self.puzzles], WINDOW)

    @property
    def selfplay(self) -> bool:
        """Its records say which puzzles the initial Solver attempted (runs from before self-play do not)."""
        return any("initial_attempted" in puzzle for puzzle in self.puzzles)


def compare(run_dirs: list[Path], out: Path, seed: int = 0) -> dict:
    """Write `out/figure.png` and `out/report.md`, and `out/selfplay.png` when a run's Solver learned; returns
    what was written, per run (`selfplay`: None when no Solver learned)."""
    if not run_dirs:
        raise ValueError("give at least one run directory")
    runs = read_runs(run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    plot(runs, out / "figure.png")
    learned = any(run.learn_every for run in runs)  # with fixed Solvers only, current and initial are one Solver
    selfplay = [selfplay_summary(run) for run in runs if run.selfplay] if learned else []
    if selfplay:
        plot_selfplay(runs, out / "selfplay.png")
    summaries = [summary(run) | {"sampled": sample_last(run.puzzles, seed)} for run in runs]
    (out / "report.md").write_text(report(runs, summaries, selfplay, seed))
    return {
        "figure": out / "figure.png",
        "report": out / "report.md",
        "panels": list(PANELS),
        "runs": summaries,
        "selfplay": {"figure": out / "selfplay.png", "runs": selfplay} if selfplay else None,
    }


def read_runs(run_dirs: list[Path]) -> list[Run]:
    runs = [read_run(Path(run_dir)) for run_dir in run_dirs]
    labels = [run.label for run in runs]
    for run in runs:  # two versions of one preset: tell them apart
        if labels.count(run.label) > 1:
            run.label += f" [{run.path}]"
    return runs


def read_run(run_dir: Path) -> Run:
    path = run_dir / "puzzles.jsonl"
    if not path.is_file():
        raise ValueError(f"{run_dir} has no puzzles.jsonl: not a training run directory, or not started")
    notes: list[str] = []
    config = read_config(run_dir, notes)
    name = config.get("name", run_dir.parent.name)
    puzzles = read_puzzles(path, notes)
    if not puzzles:
        notes.append("no puzzles logged yet: this run is left out of the figure")
    iterations, finished = config.get("trainer", {}).get("iterations"), run_dir / "iterations.jsonl"
    if iterations and finished.is_file():
        done = len({record["iteration"] for line in finished.read_text().splitlines() if (record := _parse(line))})
        if done < iterations:
            notes.append(f"{done} of {iterations} iterations finished: still training, or stopped")
    phases = read_phases(run_dir / "solver.jsonl", notes)
    # runs recorded before self-play had a section of its own kept the key under `solver`
    learn_every = config.get("selfplay", config.get("solver", {})).get("learn_every")
    seed = config.get("trainer", {}).get("seed")
    return Run(run_dir, name, run_label(name, config, run_dir), puzzles, notes, phases, learn_every, seed)


def read_config(run_dir: Path, notes: list[str]) -> dict:
    path = run_dir / "config.yaml"
    if not path.is_file():
        notes.append("no config.yaml: labelled by its directory, weights unknown")
        return {}
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        raise ValueError(f"{path} is not YAML") from None


def run_label(name: str, config: dict, run_dir: Path) -> str:
    """The legend's label: "balanced (w_d=1, w_n=1)" or "product (R_d·R_n)"; the directory without config.yaml."""
    reward = config.get("reward")
    if reward is None:
        return str(run_dir)
    if reward.get("combine") == "product":
        return f"{name} (R_d·R_n)"
    return f"{name} (w_d={reward.get('w_difficulty', 1):g}, w_n={reward.get('w_novelty', 1):g})"


def read_puzzles(path: Path, notes: list[str]) -> list[dict]:
    """Each `index` once, the last occurrence kept (a resumed run regenerates its interrupted iteration)."""
    by_index: dict[int, dict] = {}
    lines = path.read_text().splitlines()
    logged = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            where = "its last line" if number == len(lines) else f"line {number}"
            notes.append(f"{where} is cut short (a run writing or killed mid-line): skipped")
            continue
        missing = [key for key in FIELDS if key not in record]
        if missing:
            raise ValueError(f"{path} line {number} lacks {', '.join(missing)}: not a puzzles.jsonl of a training run")
        by_index[record["index"]] = record
        logged += 1
    if logged > len(by_index):
        notes.append(f"{logged - len(by_index)} puzzles logged twice (a resumed run): counted once, the last kept")
    return [by_index[index] for index in sorted(by_index)]


def read_phases(path: Path, notes: list[str]) -> dict[int, dict[str, dict]]:
    """Each evaluation set's summary by BC phase: 0 is the initial Solver's, before any BC; {} without
    solver.jsonl (a fixed Solver, or no phase yet)."""
    if not path.is_file():
        return {}
    phases: dict[int, dict[str, dict]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            notes.append(f"solver.jsonl line {number} is cut short: skipped")
            continue
        if "initial" in record:
            phases[0] = record["initial"]
        phases[record["phase"]] = record["learned"]
    return dict(sorted(phases.items()))


def _parse(line: str) -> dict | None:
    """The line's record, or None when cut short. A line cut by a killed run and continued by the
    resumed one holds a whole record after the cut: that one is kept."""
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        resumed = line.rfind('{"iteration"')
    try:
        return json.loads(line[resumed:]) if resumed > 0 else None
    except json.JSONDecodeError:
        return None


def trailing_mean(values: list[float], window: int) -> np.ndarray:
    """out[i] = mean(values[max(0, i - window + 1) : i + 1]): the first points average what exists so far."""
    sums = np.cumsum(np.asarray(values, dtype=float))
    counts = np.minimum(np.arange(1, len(sums) + 1), window)
    before = np.concatenate([[0.0], sums])[np.arange(len(sums)) + 1 - counts]
    return (sums - before) / counts


def sample_last(puzzles: list[dict], seed: int) -> list[dict]:
    """SAMPLES puzzles drawn without replacement from the last LAST (all of them when fewer), in index order."""
    last = puzzles[-LAST:]
    chosen = random.Random(seed).sample(last, min(SAMPLES, len(last)))
    return sorted(chosen, key=lambda puzzle: puzzle["index"])


def summary(run: Run) -> dict:
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


def fraction_difference(a: list[bool], b: list[bool]) -> tuple[float, float, float]:
    """The fractions of True in `a` and `b` and the difference's binomial standard error (0 when both are 0 or 1)."""
    p, q = sum(a) / len(a), sum(b) / len(b)
    return p, q, math.sqrt(p * (1 - p) / len(a) + q * (1 - q) / len(b))


def mean_difference(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """The means of `a` and `b` and the standard error of their difference, each mean's from its sample variance
    (puzzles counted as independent)."""
    return float(np.mean(a)), float(np.mean(b)), math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))


def against_unrewarded(runs: list[Run], baseline: str = "none") -> list[dict]:
    """The statistics of docs/results/discussion.md, each run against the `baseline` run (the unrewarded preset;
    [] when no run has that name). Iteration 0 is shared by runs of one seed and left out of the fractions; R_n
    is compared at the same archive positions in every run, from the first puzzle after the baseline's
    iteration 0 to the last of the shortest run, and over the second half of that range. A run still in its first
    iteration (nothing valid after it yet) has no row."""
    runs = [run for run in runs if any(p["iteration"] > 0 and p["valid"] for p in run.puzzles)]
    base = next((run for run in runs if run.name == baseline), None)
    if base is None:
        return []
    first = 1 + max(p["index"] for p in base.puzzles if p["iteration"] == 0)
    last = min(run.puzzles[-1]["index"] for run in runs)
    middle = (first + last + 1) // 2

    def later(run: Run, key: str) -> list[bool]:
        if key == "valid":
            return [bool(p["valid"]) for p in run.puzzles if p["iteration"] > 0]
        return [p["D"] is not None for p in run.puzzles if p["iteration"] > 0 and p["valid"]]

    def novelty(run: Run, start: int) -> list[float]:
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


def by_seed(runs: list[Run]) -> dict[int | None, list[Run]]:
    """The runs of each seed, in the order they came."""
    groups: dict[int | None, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.seed, []).append(run)
    return groups


EFFECTS = {  # the effects reported by run: `against_unrewarded`'s statistic, and how it is shown
    "valid": ("valid, it. 1+", True),
    "solved": ("solved of valid, it. 1+", True),
    "R_n": ("mean R_n, same positions", False),
}


def effects_by_run(rows_by_seed: dict[int | None, list[dict]]) -> list[dict]:
    """Each rewarded run's effect (its statistic minus its own seed's unrewarded run's) per seed, then over the
    seeds (`between_runs`): a reward's effect is a property of the run, so the spread between seeds is its
    uncertainty; the within-run binomial SE of each seed is kept beside it, secondary."""
    labels = list(dict.fromkeys(row["name"] for rows in rows_by_seed.values() for row in rows if not row["baseline"]))
    found = []
    for name in labels:
        for key in EFFECTS:
            per_seed = {seed: row[key] for seed, rows in rows_by_seed.items() for row in rows if row["name"] == name}
            effects = [ours - theirs for ours, theirs, _ in per_seed.values()]
            within = [se for _, _, se in per_seed.values()]
            found.append(
                {
                    "name": name,
                    "key": key,
                    "seeds": list(per_seed),
                    "within_se": within,
                    "summary": between_runs(effects),
                }
            )
    return found


def effects_report(effects: list[dict]) -> list[str]:
    """The "Effects by run" section: per seed, then the mean over seeds with the between-seed SE and t."""
    seeds = list(dict.fromkeys(seed for effect in effects for seed in effect["seeds"]))
    lines = [
        "## Effects by run",
        "",
        "The unit of a reward's effect is the training run: each run against the unrewarded run of its own seed, "
        "then the mean over seeds with the between-seed standard error and Student's t (n − 1 degrees of freedom). "
        "In brackets, secondary: the within-run binomial (or, for R_n, per-puzzle) standard error, which counts "
        "the puzzles of one trajectory as independent and so understates the uncertainty; seeds disagree far beyond "
        "it. With one seed there is no between-run uncertainty to report.",
        "",
        "| run | statistic | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean over seeds | t (df), p |",
        "|---|---|" + "--:|" * len(seeds) + "--:|--:|",
    ]
    for effect in effects:
        label, percent = EFFECTS[effect["key"]]
        scale, unit = (100, " pt") if percent else (1, "")
        summary = effect["summary"]
        cells = dict(zip(effect["seeds"], zip(summary.effects, effect["within_se"])))
        per_seed = [
            f"{scale * cells[seed][0]:+.3g}{unit} (±{scale * cells[seed][1]:.2g})" if seed in cells else "–"
            for seed in seeds
        ]
        mean = f"{scale * summary.mean:+.3g}{unit}"
        mean += f" ± {scale * summary.se:.2g}" if summary.se is not None else " (one seed)"
        test = f"{summary.t:+.2f} ({summary.runs - 1}), {summary.p:.3f}" if summary.t is not None else "–"
        lines.append(f"| {effect['name']} | {label} | " + " | ".join(per_seed) + f" | {mean} | {test} |")
    return [*lines, ""]


def unrewarded_report(rows: list[dict], seed: int | None = None) -> list[str]:
    """The section of `against_unrewarded`'s rows of one seed: each number with its difference to the baseline in
    within-run standard errors."""
    first, last, middle = rows[0]["positions"]
    lines = [
        "## Against the unrewarded run" + (f", seed {seed}" if seed is not None else ""),
        "",
        "Fractions over the iterations after the first (identical in runs of one seed); R_n over the same archive "
        f"positions in every run, puzzles {first}–{last}, and {middle}–{last}. In brackets: the difference to the "
        "unrewarded run in within-run standard errors (binomial for fractions; of the means for R_n, neighbouring "
        "puzzles counted as independent): this run against that one, not the reward's effect (see Effects by "
        "run).",
        "",
        f"| run | solved of valid, by iteration | valid, it. 1+ | solved of valid, it. 1+ | mean R_n, {first}–{last} | "
        f"mean R_n, {middle}–{last} | distinct in last {LAST} |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]

    def cell(statistic: tuple[float, float, float], baseline: bool, percent: bool = False) -> str:
        ours, theirs, se = statistic
        text = f"{100 * ours:.1f}%" if percent else f"{ours:.3f}"
        return text if baseline else f"{text} ({(ours - theirs) / se if se else 0.0:+.1f} SE)"

    for row in rows:
        by_iteration = " ".join("–" if value is None else f"{value:.2f}" for value in row["solved_by_iteration"])
        cells = [
            row["label"],
            by_iteration,
            cell(row["valid"], row["baseline"], percent=True),
            cell(row["solved"], row["baseline"]),
            cell(row["R_n"], row["baseline"]),
            cell(row["R_n_second_half"], row["baseline"]),
            str(row["distinct_last"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


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


def slope_and_se(x: list[float], y: list[float]) -> tuple[float, float] | None:
    """The least-squares slope of y on x and its standard error (None with fewer than 3 points)."""
    if len(x) < 3:
        return None
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dx = xs - xs.mean()
    slope = float(dx @ (ys - ys.mean()) / (dx @ dx))
    residuals = ys - ys.mean() - slope * dx
    return slope, math.sqrt(float(residuals @ residuals) / (len(xs) - 2) / float(dx @ dx))


def paired_mean_and_se(differences: list[float]) -> tuple[float, float] | None:
    """The mean of paired differences and its standard error (None with fewer than 2)."""
    return mean_and_se(differences) if len(differences) > 1 else None


def selfplay_summary(run: Run) -> dict:
    """`pass_rate`: the mean over the last LAST puzzles the initial Solver attempted (None: none); `trend`: each
    Solver's pass-rate slope per 100 puzzles generated, with its standard error (the paper's objective: the
    initial Solver's falls, the learning one's holds); `gap`: the current minus the initial Solver's pass rate on
    the same puzzles, mean and standard error, over the first and the second half of them; `evaluations`: set ->
    "pass@k" -> (phase 0's, the last phase's)."""
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
        "gap": {"first_half": paired_mean_and_se(gaps[:half]), "second_half": paired_mean_and_se(gaps[half:])},
        "evaluations": dict(evaluations),
    }


def colours(runs: list[Run]) -> list[str | None]:
    """Each run's colour: its preset's, else the next of matplotlib's cycle (None: no puzzles, no line)."""
    cycle = (f"C{n}" for n in itertools.count())
    return [(COLOURS.get(run.name) or next(cycle)) if run.puzzles else None for run in runs]


def plot(runs: list[Run], path: Path) -> None:
    from matplotlib.figure import Figure  # the object API renders with Agg, no pyplot or display involved

    figure = Figure(figsize=(16, 4.5), layout="constrained")
    axes = figure.subplots(1, len(PANELS))
    for axis, key in zip(axes, PANELS):
        plot_reward(axis, runs, key)
    _legend(figure, axes[0])
    figure.savefig(path, dpi=120)


def plot_selfplay(runs: list[Run], path: Path) -> None:
    """selfplay.png: (a) the Solvers' pass rates, (b) the evaluations over BC phases, (c) R_n; a colour per run,
    black stand-ins in (a) and (b) for what the line styles and markers mean."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(16, 4.5), layout="constrained")
    rates, evaluations, novelty = figure.subplots(1, 3)
    curves = [evaluation_curves(run.phases) for run in runs]
    sets = {name: MARKERS[n % len(MARKERS)] for n, name in enumerate(dict.fromkeys(s for c in curves for s, _ in c))}
    keys = {key: "-" if key == "pass@1" else "--" for run_curves in curves for _, key in run_curves}
    for run, colour, run_curves in zip(runs, colours(runs), curves):
        index, current, initial = pass_rates(run.puzzles)
        for rate, style in ((current, "-"), (initial, "--")):
            if rate:
                rates.plot(index, trailing_mean(rate, WINDOW), color=colour, linestyle=style)
        for (name, key), points in run_curves.items():
            evaluations.plot(*zip(*points), color=colour, linestyle=keys[key], marker=sets[name])
    rates.plot([], [], color="black", label="current Solver")
    rates.plot([], [], color="black", linestyle="--", label="initial Solver")
    rates.set(
        title="pass rate 1/D on the puzzles the initial Solver attempted",
        xlabel="puzzles generated",
        ylabel=f"1/D (0: unsolved), mean of the last {WINDOW}",
    )
    rates.legend()
    for name, marker in sets.items():
        evaluations.plot([], [], color="black", linestyle="none", marker=marker, label=name)
    for key, style in keys.items():
        evaluations.plot([], [], color="black", linestyle=style, label=key)
    evaluations.set(title="evaluations after each BC phase (0: the initial Solver)", xlabel="BC phase", ylabel="pass@k")
    evaluations.xaxis.set_major_locator(MaxNLocator(integer=True))
    if sets:
        evaluations.legend()
    else:
        evaluations.text(0.5, 0.5, "no BC phase logged", ha="center", transform=evaluations.transAxes)
    for axis in (rates, evaluations):
        axis.grid(alpha=0.3)
        axis.set_ylim(0, max(axis.get_ylim()[1], 0.05))  # from 0: a cropped axis makes a puzzle or two a climb
    plot_reward(novelty, runs, "R_n")
    _legend(figure, novelty)
    figure.savefig(path, dpi=120)


def plot_reward(axis, runs: list[Run], key: str) -> None:
    """`key`'s trailing mean against puzzles generated, a line per run: a panel of figure.png."""
    for run, colour in zip(runs, colours(runs)):
        if run.puzzles:
            axis.plot([p["index"] for p in run.puzzles], run.smoothed(key), label=run.label, color=colour)
    axis.set(title=PANELS[key], xlabel="puzzles generated", ylabel=f"{key}, mean of the last {WINDOW} puzzles")
    axis.grid(alpha=0.3)


def _legend(figure, axis) -> None:
    """The runs' legend below the panels."""
    handles, labels = axis.get_legend_handles_labels()
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(3, len(handles)))


def report(runs: list[Run], summaries: list[dict], selfplay: list[dict], seed: int) -> str:
    lines = [
        "# Setter training runs compared",
        "",
        "![R_d, R_n and R against puzzles generated](figure.png)",
        "",
        f"As the paper's figure 2: R_d, R_n and R against puzzles generated, each the mean of the last "
        f"{WINDOW} puzzles (fewer at the start). Each puzzle `index` counts once (the last logged).",
        "",
        f"| run | puzzles | valid % | solved % | R_d | R_n | R | distinct in last {LAST} |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for run, row in zip(runs, summaries):
        final = [_number(row["final"][key]) for key in PANELS]
        lines.append(
            f"| {run.label} | {row['puzzles']} | {_percent(row['valid_frac'])} | "
            f"{_percent(row['solved_frac'])} | {' | '.join(final)} | "
            f"{row['distinct_last']} of {min(LAST, row['puzzles'])} |"
        )
    lines += [
        "",
        "R_d, R_n, R: the smoothed values at the last puzzle. Solved: D is finite (the Solver passed at least once).",
        "",
    ]
    noted = [f"- **{run.label}** (`{run.path}`): " + "; ".join(run.notes) for run in runs if run.notes]
    lines += [*noted, ""] if noted else []
    seeds = by_seed(runs)
    within = {seed: rows for seed, group in seeds.items() if len(rows := against_unrewarded(group)) > 1}
    lines += effects_report(effects_by_run(within)) if within else []
    for seed, rows in within.items():
        lines += unrewarded_report(rows, seed if len(seeds) > 1 else None)
    lines += selfplay_report(selfplay) if selfplay else []
    lines += [
        "## Puzzles at the end of training (as the paper's appendix C)",
        "",
        f"{SAMPLES} per run, drawn without replacement from its last {LAST} (seed {seed}; all of them when fewer).",
        "",
    ]
    for run, row in zip(runs, summaries):
        lines += [f"### {run.label}", ""]
        if not row["sampled"]:
            lines += ["No puzzles logged yet.", ""]
        for puzzle in row["sampled"]:
            lines += [
                f"Puzzle {puzzle['index']}: {_difficulty(puzzle)}, R_d = {puzzle['R_d']:.2f}, "
                f"R_n = {puzzle['R_n']:.2f}",
                "",
                *_fenced(puzzle["puzzle"].strip("\n")),
                "",
            ]
    return "\n".join(lines)


def selfplay_report(rows: list[dict]) -> list[str]:
    """The "Self-play" section: a table per self-play run, its initial Solver beside its current one."""
    lines = [
        "## Self-play",
        "",
        "![The Solvers' pass rates, their evaluations over BC phases, and R_n](selfplay.png)",
        "",
        "Left: the pass rate 1/D (0: unsolved) of the current Solver (solid) and of the initial one (dashed) on "
        f"the valid puzzles the initial Solver also attempted, each the mean of the last {WINDOW} of them. Middle: "
        "each evaluation set's pass@1 (solid) and pass@K (dashed) after each BC phase (`solver.jsonl`), phase 0 "
        "being the initial Solver. Right: R_n, as in the figure above. In the tables, the evaluations are phase "
        "0's and the last phase's.",
        "",
    ]
    for row in rows:
        attempted, rate = row["attempted"], row["pass_rate"]
        every = {None: "", 0: " (fixed: `selfplay.learn_every` 0)"}.get(
            row["learn_every"], f" (one after every {row['learn_every']} iterations)"
        )
        lines += [
            f"| {row['label']} | initial Solver | current Solver |",
            "|---|--:|--:|",
            f"| BC phases | 0 | {row['phases']}{every} |",
            f"| pass rate 1/D, mean of the last {min(LAST, attempted)} of the {attempted} puzzles the initial "
            f"Solver attempted | {_number(rate['initial'])} | {_number(rate['current'])} |",
            f"| its trend per 100 puzzles generated (least-squares slope ± SE) | {_estimate(row['trend']['initial'])} "
            f"| {_estimate(row['trend']['current'])} |",
            f"| current − initial on the same puzzles, first half / second half (± SE) | | "
            f"{_estimate(row['gap']['first_half'])} / {_estimate(row['gap']['second_half'])} |",
        ]
        for name, keys in row["evaluations"].items():
            lines += [f"| {name} {key} | {_number(first)} | {_number(last)} |" for key, (first, last) in keys.items()]
        lines.append("")
    return lines


def _estimate(value: tuple[float, float] | None) -> str:
    return "–" if value is None else f"{value[0]:+.3f} ± {value[1]:.3f}"


def _difficulty(puzzle: dict) -> str:
    if not puzzle["valid"]:
        return f"invalid ({puzzle.get('reason') or 'rejected'})"
    return "D = ∞ (unsolved)" if puzzle["D"] is None else f"D = {puzzle['D']:.2f}"


def _fenced(text: str) -> list[str]:
    """A fence longer than any run of backticks in the text, so a puzzle cannot close it."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "python", text, fence]


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.1f}"
