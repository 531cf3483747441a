"""A training run as the comparison reads it: `read_run(run_dir)` gives its puzzles (`puzzles.jsonl`, each `index`
once, the last occurrence kept: a resumed run may have logged some puzzles of its interrupted iteration twice), its
BC phases' evaluations (`solver.jsonl`) and what its `config.yaml` says (name, weights, seed, self-play). A run still
training is read as far as it got; a line cut short by a crash is skipped with a note. A published run may keep
its records gzipped (`puzzles.jsonl.gz`, ...): they read the same. `iterations=N` reads each run's first N
iterations only (its puzzles and the BC phases after them), to compare runs of different lengths over the same
iterations; a run cut so says so in a note."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from codeplay_lightning.experiments.statistics import trailing_mean

WINDOW = 200  # puzzles in the trailing mean, as the paper's curves
PANELS = {"R_d": "difficulty reward $R_d$", "R_n": "novelty reward $R_n$", "R": "total reward $R$"}
FIELDS = ("index", "puzzle", "valid", "D", "R_d", "R_n", "R")


@dataclass
class TrainingRun:
    """One training run's records, as `read_run` found them."""

    path: Path
    name: str
    label: str
    puzzles: list[dict]  # in `index` order, each index once
    notes: list[str] = field(default_factory=list)
    phases: dict[int, dict[str, dict]] = field(default_factory=dict)  # solver.jsonl's evaluations by BC phase
    learn_every: int | None = None  # selfplay.learn_every (0: a fixed Solver); None: not in config.yaml
    seed: int | None = None  # trainer.seed; None: not in config.yaml
    iterations: list[dict] = field(default_factory=list)  # iterations.jsonl's records, in order, each iteration once
    evaluations: list[dict] = field(default_factory=list)  # eval.jsonl's, the same way (the Setter's `eval/*` curve)

    def smoothed(self, key: str) -> np.ndarray:
        return trailing_mean([puzzle[key] for puzzle in self.puzzles], WINDOW)

    @property
    def selfplay(self) -> bool:
        """Its records say which puzzles the initial Solver attempted (runs from before self-play do not)."""
        return any("initial_attempted" in puzzle for puzzle in self.puzzles)

    @property
    def solver_learns(self) -> bool:
        """A self-play run whose Solver learns (`selfplay.learn_every` > 0)."""
        return self.selfplay and bool(self.learn_every)

    @property
    def solver_fixed(self) -> bool:
        """A self-play run whose Solver stays fixed (`selfplay.learn_every` 0): the baseline of one that learns."""
        return self.selfplay and self.learn_every == 0


def read_runs(run_dirs: list[Path], iterations: int | None = None) -> list[TrainingRun]:
    runs = [read_run(Path(run_dir), iterations) for run_dir in run_dirs]
    repeated: dict[str, list[TrainingRun]] = {}
    for run in runs:
        repeated.setdefault(run.label, []).append(run)
    for same in (same for same in repeated.values() if len(same) > 1):  # one preset twice: by seed, else by path
        seeds = [run.seed for run in same]
        by_seed = None not in seeds and len(set(seeds)) == len(seeds)
        for run in same:
            run.label += f", seed {run.seed}" if by_seed else f" [{run.path}]"
    return runs


def read_run(run_dir: Path, iterations: int | None = None) -> TrainingRun:
    path = records_file(run_dir, "puzzles.jsonl")
    if path is None:
        raise ValueError(f"{run_dir} has no puzzles.jsonl: not a training run directory, or not started")
    notes: list[str] = []
    config = read_config(run_dir, notes)
    name = config.get("name", run_dir.parent.name)
    puzzles = read_puzzles(path, notes)
    if iterations is not None and any(puzzle["iteration"] >= iterations for puzzle in puzzles):
        notes.append(f"its first {iterations} iterations only (compare --iterations {iterations})")
        puzzles = [puzzle for puzzle in puzzles if puzzle["iteration"] < iterations]
    if not puzzles:
        notes.append("no puzzles logged yet: this run is left out of the figure")
    planned, logged = config.get("trainer", {}).get("iterations"), records_file(run_dir, "iterations.jsonl")
    finished = read_by_iteration(logged)
    if planned and logged is not None and len(finished) < planned:
        notes.append(f"{len(finished)} of {planned} iterations finished: still training, or stopped")
    phases = read_phases(records_file(run_dir, "solver.jsonl"), notes, iterations)
    # runs recorded before self-play had a section of its own kept the key under `solver`
    learn_every = config.get("selfplay", config.get("solver", {})).get("learn_every")
    seed = config.get("trainer", {}).get("seed")
    return TrainingRun(
        path=run_dir,
        name=name,
        label=run_label(name, config, run_dir),
        puzzles=puzzles,
        notes=notes,
        phases=phases,
        learn_every=learn_every,
        seed=seed,
        iterations=first_iterations(finished, iterations),
        evaluations=first_iterations(read_by_iteration(records_file(run_dir, "eval.jsonl")), iterations),
    )


def records_file(run_dir: Path, name: str) -> Path | None:
    """`run_dir`'s records `name` as the run wrote them, or gzipped (`name`.gz) as a published run keeps them; None
    when it has neither."""
    return next((path for path in (run_dir / name, run_dir / f"{name}.gz") if path.is_file()), None)


def records_lines(path: Path) -> list[str]:
    return (gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()).decode().splitlines()


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
    lines = records_lines(path)
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


def read_by_iteration(path: Path | None) -> list[dict]:
    """A records file of one line per iteration (iterations.jsonl, eval.jsonl) in iteration order, each iteration
    once, the last kept (a resumed run may log its interrupted iteration again); [] without the file. A line cut
    short is skipped."""
    if path is None:
        return []
    by_iteration = {record["iteration"]: record for line in records_lines(path) if (record := _parse(line))}
    return [by_iteration[iteration] for iteration in sorted(by_iteration)]


def first_iterations(records: list[dict], iterations: int | None) -> list[dict]:
    return records if iterations is None else [record for record in records if record["iteration"] < iterations]


def read_phases(path: Path | None, notes: list[str], iterations: int | None = None) -> dict[int, dict[str, dict]]:
    """Each evaluation set's summary by BC phase: 0 is the initial Solver's, before any BC; {} without
    solver.jsonl (None: a fixed Solver, or no phase yet). With `iterations`, the phases after those only."""
    if path is None:
        return {}
    phases: dict[int, dict[str, dict]] = {}
    for number, line in enumerate(records_lines(path), 1):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            notes.append(f"solver.jsonl line {number} is cut short: skipped")
            continue
        if iterations is not None and record["iteration"] >= iterations:
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
