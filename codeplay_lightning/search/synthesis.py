"""`codeplay synthesize`: one code search (GIF-MCTS or a baseline) per task, all run together against one
LLM, with each task's result and search state written to `out/tasks/` and a summary to `out/summary.*`."""

from __future__ import annotations

import gzip
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm import LLM
from codeplay_lightning.puzzles import Puzzle, bundled_puzzles, puzzle_class
from codeplay_lightning.puzzles.files import puzzles_to_solve, read_puzzle_file
from codeplay_lightning.search import METHODS, P3Task, Search, Task, load_apps, make_search, run_searches

TASK_KINDS = ("p3", "apps")
BUNDLED = "bundled"  # the PATH that names the package's bundled puzzles
SHOWN_PROBLEMS = 3  # unusable lines quoted in the error about a puzzle file


@dataclass(frozen=True)
class SynthesisConfig:
    method: str = "gif-mcts"  # one of METHODS
    budget: int = 50  # LLM calls per task (paper §5.3)
    seed: int = 0  # WorldCoder's Thompson sampling on task i draws from seed + i

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown search method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.budget < 1:
            raise ValueError(f"budget must be at least 1 LLM call, got {self.budget}")


@dataclass(frozen=True)
class TaskOutcome:
    name: str
    file: str  # the task's result, relative to the output directory
    score: float  # of the best program
    strict: bool  # score == 1
    calls: int
    solved_at: int | None  # the call that found the first program scoring 1


@dataclass(frozen=True)
class Summary:
    method: str
    llm: str
    budget: int
    tasks: int
    solved: int  # tasks with a program scoring 1
    solved_percent: float
    mean_score: float  # of the best programs
    mean_calls: float
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    llm_seconds: float
    wall_seconds: float
    arguments: dict  # how the run was made, as given
    outcomes: list[TaskOutcome]

    def rows(self) -> list[tuple[str, str]]:
        """The headline numbers as (label, value), for the terminal and summary.md."""
        return [
            ("method", self.method),
            ("llm", self.llm),
            ("budget", f"{self.budget} LLM calls per task"),
            ("tasks", str(self.tasks)),
            ("solved (score 1)", f"{self.solved} ({self.solved_percent:.1f}%)"),
            ("mean best score", f"{self.mean_score:.3f}"),
            ("mean calls", f"{self.mean_calls:.1f}"),
            ("LLM calls", str(self.llm_calls)),
            ("prompt tokens", str(self.prompt_tokens)),
            ("completion tokens", str(self.completion_tokens)),
            ("LLM seconds", f"{self.llm_seconds:.1f}"),
            ("wall seconds", f"{self.wall_seconds:.1f}"),
        ]


def load_tasks(
    kind: str,
    path: str,
    sandbox: Sandbox,
    split: str | None = None,
    p3_split: str | None = None,
    first_of_class: bool = False,
) -> dict[str, Task]:
    """The tasks at `path` by name, in order. `p3`: a puzzle file as `codeplay evaluate --puzzles` reads it (only
    the puzzles of `split`, as there: our corpus's own splits, or P3's with `p3_split`; with `first_of_class`, only
    the first instance of each P3 class or corpus family), or `bundled`; `apps`: an APPS problem directory or a
    directory of them."""
    if kind == "p3":
        puzzles = bundled_puzzles() if path == BUNDLED else distinct_puzzles(path)
        if split is not None:
            chosen = {puzzle.name for puzzle in puzzles_to_solve(path, split, p3_split=p3_split)}
            puzzles = [puzzle for puzzle in puzzles if puzzle.name in chosen]
        if first_of_class:
            firsts: dict[str, Puzzle] = {}
            for puzzle in puzzles:
                firsts.setdefault(puzzle_class(puzzle), puzzle)
            puzzles = list(firsts.values())
        return {puzzle.name: P3Task(puzzle, sandbox) for puzzle in puzzles}
    if split is not None or first_of_class:
        raise ValueError("--split and --first-of-class choose among puzzles: only with --task p3")
    if kind == "apps":
        return {task.name: task for task in load_apps(path, sandbox)}
    raise ValueError(f"unknown task kind {kind!r}; choose one of {', '.join(TASK_KINDS)}")


def distinct_puzzles(path: str | Path) -> list[Puzzle]:
    """Each puzzle of a puzzle file once: a P3 file repeats an instance per reference solution."""
    entries = read_puzzle_file(path)
    problems = [entry.error for entry in entries if entry.error]
    if problems:
        more = f" (and {len(problems) - SHOWN_PROBLEMS} more)" if len(problems) > SHOWN_PROBLEMS else ""
        raise ValueError(f"{path} has unusable lines: {'; '.join(problems[:SHOWN_PROBLEMS])}{more}")
    puzzles: dict[str, Puzzle] = {}
    for entry in entries:
        if puzzles.setdefault(entry.name, entry.puzzle) != entry.puzzle:
            raise ValueError(f"{path} has two different puzzles named {entry.name!r}")
    if not puzzles:
        raise ValueError(f"{path} holds no puzzle")
    return list(puzzles.values())


def synthesize(
    tasks: dict[str, Task],
    llm: LLM,
    config: SynthesisConfig,
    out: Path,
    *,
    llm_spec: str,
    arguments: dict | None = None,
    on_progress: Callable[[int, int, int], None] | None = None,
) -> Summary:
    """Search every task with `config.method` within `config.budget` LLM calls, all searches' calls
    batched per round; writes `out/tasks/<index>_<name>.json` per task as its search ends (an interrupted run keeps
    its finished tasks), then, once all are done, packs them into `out/tasks.jsonl.gz` (`pack_tasks`), and writes
    `out/summary.json` / `out/summary.md` (with a row per task). `on_progress(finished tasks, tasks, LLM calls)`
    after each round."""
    if not tasks:
        raise ValueError("no tasks to synthesize")
    searches = [
        make_search(config.method, task, config.budget, seed=config.seed + index)
        for index, task in enumerate(tasks.values())
    ]
    usage_before = replace(llm.usage)  # the LLM may have been used before: count this run only
    started = time.perf_counter()
    task_dir = out / "tasks"
    task_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*task_dir.glob("*.json"), out / PACKED_TASKS]:
        stale.unlink(missing_ok=True)
    written: dict[int, TaskOutcome] = {}

    def after_round(_: Sequence[Search]) -> None:
        """Each task's file as soon as its search ends: an interrupted run keeps the finished tasks."""
        for index, (name, search) in enumerate(zip(tasks, searches)):
            if search.finished and index not in written:
                written[index] = write_task(
                    out, f"tasks/{index:04d}_{safe_name(name)}.json", name, config.method, search
                )
        if on_progress is not None:
            on_progress(len(written), len(searches), llm.usage.calls - usage_before.calls)

    run_searches(searches, llm, on_round=after_round)
    outcomes = [written[index] for index in range(len(searches))]

    solved = sum(outcome.strict for outcome in outcomes)
    summary = Summary(
        method=config.method,
        llm=llm_spec,
        budget=config.budget,
        tasks=len(outcomes),
        solved=solved,
        solved_percent=100 * solved / len(outcomes),
        mean_score=sum(outcome.score for outcome in outcomes) / len(outcomes),
        mean_calls=sum(outcome.calls for outcome in outcomes) / len(outcomes),
        llm_calls=llm.usage.calls - usage_before.calls,
        prompt_tokens=llm.usage.prompt_tokens - usage_before.prompt_tokens,
        completion_tokens=llm.usage.completion_tokens - usage_before.completion_tokens,
        llm_seconds=llm.usage.seconds - usage_before.seconds,
        wall_seconds=time.perf_counter() - started,
        arguments=arguments or {},
        outcomes=outcomes,
    )
    pack_tasks(out, [outcome.file for outcome in outcomes])
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=1) + "\n")
    (out / "summary.md").write_text(summary_markdown(summary))
    return summary


PACKED_TASKS = "tasks.jsonl.gz"  # a finished run's task records, one JSON line each: {"file": ..., "record": ...}


def pack_tasks(out: Path, files: list[str]) -> None:
    """The task records `files` (paths under `out`) packed into `out/tasks.jsonl.gz`, in order, written to a
    temporary file first; then the files are removed. A run of 44 tasks' trees: ~0.4 MB against ~2.5 MB."""
    partial = out / (PACKED_TASKS + ".partial")
    with gzip.open(partial, "wt", compresslevel=9) as packed:
        for file in files:
            packed.write(json.dumps({"file": file, "record": json.loads((out / file).read_text())}) + "\n")
    partial.replace(out / PACKED_TASKS)
    for file in files:
        (out / file).unlink()
    if (out / "tasks").is_dir() and not any((out / "tasks").iterdir()):
        (out / "tasks").rmdir()


def task_records(out: Path) -> dict[str, dict]:
    """A run's task records by file name: from `tasks.jsonl.gz`, or (a run still going, or interrupted) from the
    files under `tasks/`."""
    if (out / PACKED_TASKS).is_file():
        with gzip.open(out / PACKED_TASKS, "rt") as packed:
            return {entry["file"]: entry["record"] for entry in map(json.loads, packed)}
    return {f"tasks/{path.name}": json.loads(path.read_text()) for path in sorted((out / "tasks").glob("*.json"))}


def write_task(out: Path, file: str, name: str, method: str, search: Search) -> TaskOutcome:
    result = search.result()
    outcome = TaskOutcome(name, file, result.score, result.score == 1.0, result.calls, result.solved_at)
    record = {
        "name": name,
        "method": method,
        "program": result.program,
        "score": result.score,
        "strict": outcome.strict,
        "calls": result.calls,
        "solved_at": result.solved_at,
        "search": json.loads(search.to_json()),
    }
    (out / file).write_text(json.dumps(record, indent=1) + "\n")
    return outcome


def safe_name(name: str) -> str:
    """`name` as a file name: runs of characters other than letters, digits, `.`, `_` and `-` become `_`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:100] or "task"


def summary_markdown(summary: Summary) -> str:
    lines = [f"# Code synthesis: {summary.method}, {summary.tasks} tasks", "", "| | |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in summary.rows()]
    lines += [
        "",
        f"Arguments: `{json.dumps(summary.arguments)}`",
        "",
        "## Tasks",
        "",
        "| task | best score | strict | calls | solved at | file |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {o.name} | {o.score:.3f} | {'yes' if o.strict else 'no'} | {o.calls} | "
        f"{'-' if o.solved_at is None else o.solved_at} | {o.file} |"
        for o in summary.outcomes
    ]
    return "\n".join(lines) + "\n"
