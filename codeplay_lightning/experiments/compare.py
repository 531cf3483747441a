"""`compare(run_dirs, out)`: the paper's figure 2 and appendix C from training runs' `puzzles.jsonl`.

    compare([Path("runs/balanced/version_0"), Path("runs/none/version_0")], Path("docs/results"))

Writes `figure.png` (R_d, R_n and R against the number of puzzles generated, each a trailing mean
over the last 200 puzzles, one line per run) and `report.md` (a summary table, then 10 puzzles per
run sampled without replacement from its last 100). A resumed run may have logged some puzzles of
its interrupted iteration twice: each `index` counts once, its last occurrence kept. A run still
training is read as far as it got; a line cut short by a crash is skipped with a note.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

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


@dataclass
class Run:
    path: Path
    name: str
    label: str
    puzzles: list[dict]  # in `index` order, each index once
    notes: list[str] = field(default_factory=list)

    def smoothed(self, key: str) -> np.ndarray:
        return trailing_mean([puzzle[key] for puzzle in self.puzzles], WINDOW)


def compare(run_dirs: list[Path], out: Path, seed: int = 0) -> dict:
    """Write `out/figure.png` and `out/report.md`; returns what was written, per run."""
    if not run_dirs:
        raise ValueError("give at least one run directory")
    runs = read_runs(run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    plot(runs, out / "figure.png")
    summaries = [summary(run) | {"sampled": sample_last(run.puzzles, seed)} for run in runs]
    (out / "report.md").write_text(report(runs, summaries, seed))
    return {"figure": out / "figure.png", "report": out / "report.md", "panels": list(PANELS), "runs": summaries}


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
    return Run(run_dir, name, run_label(name, config, run_dir), puzzles, notes)


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


def plot(runs: list[Run], path: Path) -> None:
    from matplotlib.figure import Figure  # the object API renders with Agg, no pyplot or display involved

    figure = Figure(figsize=(16, 4.5), layout="constrained")
    axes = figure.subplots(1, len(PANELS))
    for axis, (key, title) in zip(axes, PANELS.items()):
        for run in runs:
            if run.puzzles:
                axis.plot(
                    [p["index"] for p in run.puzzles], run.smoothed(key), label=run.label, color=COLOURS.get(run.name)
                )
        axis.set(title=title, xlabel="puzzles generated", ylabel=f"{key}, mean of the last {WINDOW} puzzles")
        axis.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(3, len(handles)))
    figure.savefig(path, dpi=120)


def report(runs: list[Run], summaries: list[dict], seed: int) -> str:
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
