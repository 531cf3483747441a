"""The comparison's figures: `figure.png` (the paper's figure 2: R_d, R_n and R against puzzles generated, one line
per run), `selfplay.png` (the Solvers' pass rates, their evaluations over BC phases, R_n), `effects.png` (the
effects by run: each seed's, and their mean with its between-seed interval) and `memory.png` (each iteration's peak
resident memory against its goal)."""

from __future__ import annotations

import itertools
from pathlib import Path

from codeplay_lightning.experiments.runs import PANELS, WINDOW, TrainingRun
from codeplay_lightning.experiments.statistics import trailing_mean
from codeplay_lightning.experiments.summaries import evaluation_curves, memory_goal_gib, pass_rates

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


def colours(runs: list[TrainingRun]) -> list[str | None]:
    """Each run's colour: its preset's, else the next of matplotlib's cycle (None: no puzzles, no line)."""
    cycle = (f"C{n}" for n in itertools.count())
    return [(COLOURS.get(run.name) or next(cycle)) if run.puzzles else None for run in runs]


def plot(runs: list[TrainingRun], path: Path) -> None:
    from matplotlib.figure import Figure  # the object API renders with Agg, no pyplot or display involved

    figure = Figure(figsize=(16, 4.5), layout="constrained")
    axes = figure.subplots(1, len(PANELS))
    for axis, key in zip(axes, PANELS):
        plot_reward(axis, runs, key)
    _legend(figure, axes[0])
    figure.savefig(path, dpi=120)


def plot_selfplay(runs: list[TrainingRun], path: Path) -> None:
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


def plot_effects(effects: list[dict], path: Path) -> None:
    """effects.png: a panel per statistic, a row per run: each seed's effect against its baseline (a dot coloured by
    seed) and their mean with its 95% interval from the between-seed SE (Student's t, n − 1 degrees of freedom),
    beside a line at 0, no effect."""
    from matplotlib.figure import Figure

    statistics = list(dict.fromkeys(effect["label"] for effect in effects))
    seeds = list(dict.fromkeys(seed for effect in effects for seed in effect["seeds"]))
    rows = max(sum(effect["label"] == label for effect in effects) for label in statistics)
    figure = Figure(figsize=(4.5 * len(statistics), 1.5 + 0.45 * rows), layout="constrained")
    for axis, label in zip(figure.subplots(1, len(statistics), squeeze=False)[0], statistics):
        shown = [effect for effect in effects if effect["label"] == label]
        for row, effect in enumerate(shown):
            scale, summary = (100 if effect["percent"] else 1), effect["summary"]
            for seed, value in zip(effect["seeds"], summary.effects):
                axis.plot(scale * value, row, "o", color=f"C{seeds.index(seed)}", alpha=0.8)
            half = summary.half_interval or 0.0
            axis.errorbar(scale * summary.mean, row - 0.25, xerr=scale * half, fmt="D", color="black", capsize=3)
        axis.axvline(0, color="grey", linewidth=0.8)
        axis.set_yticks(range(len(shown)), [effect["name"] for effect in shown])
        axis.set_ylim(len(shown) - 0.5, -0.75)
        axis.set(title=label, xlabel="points" if shown[0]["percent"] else "difference")
        axis.grid(alpha=0.3, axis="x")
    for seed in seeds:
        axis.plot([], [], "o", color=f"C{seeds.index(seed)}", label=f"seed {seed}")
    axis.errorbar([], [], xerr=[], fmt="D", color="black", capsize=3, label="mean, 95% interval")
    _legend(figure, axis)
    figure.savefig(path, dpi=120)


def plot_memory(runs: list[TrainingRun], path: Path) -> None:
    """memory.png: each iteration's peak RSS, a line per run, and a black line at each goal that applies."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 5), layout="constrained")
    axis = figure.subplots()
    for run, colour in zip(runs, colours(runs)):
        peaks = [(record["iteration"], record["peak_rss_gib"]) for record in run.iterations if "peak_rss_gib" in record]
        if peaks:
            axis.plot(*zip(*peaks), label=run.label, color=colour, marker=".")
    goals = {memory_goal_gib(run): run.solver_learns for run in runs}
    for goal, learns in sorted(goals.items()):
        whose, style = ("the Solver learns", ":") if learns else ("the Setter alone", "--")
        axis.axhline(goal, color="black", linestyle=style, linewidth=0.8, label=f"goal, {whose}: {goal:g} GiB")
    axis.set(title="peak resident memory per iteration", xlabel="iteration", ylabel="peak RSS (GiB)")
    axis.set_ylim(0, max(axis.get_ylim()[1], max(goals, default=0) * 1.1))
    axis.grid(alpha=0.3)
    _legend(figure, axis)
    figure.savefig(path, dpi=120)


def plot_reward(axis, runs: list[TrainingRun], key: str) -> None:
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
