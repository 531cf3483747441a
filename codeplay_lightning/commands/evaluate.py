"""`codeplay evaluate`: the Solver's pass@1 and pass@K on a puzzle file, or the Setter's rates on N puzzles it
samples. The prompt's few-shot count, the temperature and the token cap default to the configs' (`RolloutConfig`,
`SolverConfig`); K defaults to 4, the pass@4 the published numbers report."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from codeplay_lightning.commands.args import (
    add_model_options,
    add_sandbox_options,
    existing_file,
    load_model,
    sandbox,
)
from codeplay_lightning.commands.output import console, progress
from codeplay_lightning.config import WARMSTART_ALIAS, RolloutConfig, SolverConfig

if TYPE_CHECKING:
    from rich.progress import Progress

    from codeplay_lightning.solver import FewShotSolver

HELP = "Solver pass@1 and pass@K on a puzzle file, or the Setter's valid, solved, distinct and novelty rates"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    task = parser.add_mutually_exclusive_group(required=True)
    task.add_argument(
        "--puzzles", type=existing_file, metavar="FILE", help="P3-format JSON, our corpus JSON or JSONL of {f, g?}"
    )
    task.add_argument("--setter", type=int, metavar="N", help="sample N puzzles from the Setter prompt")
    parser.add_argument(
        "--split", help="only the entries of a corpus file in this split (train, heldout_instances, heldout_families)"
    )
    parser.add_argument(
        "--p3-split", metavar="SPLIT_JSON", help="P3's split.json: --split train or test picks P3 classes"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N puzzles (after --split)")
    parser.add_argument(
        "--attempts",
        type=int,
        default=4,
        metavar="K",
        help="Solver samples per puzzle, for pass@1 and pass@K (default: %(default)s, as training at the CPU scale)",
    )
    parser.add_argument(
        "--fewshot",
        type=int,
        default=RolloutConfig.fewshot,
        help="bundled few-shot puzzles in the prompts (default: %(default)s, as rollout.fewshot)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="rows sampled together")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=SolverConfig.max_new_tokens,
        help="per attempt (default: %(default)s, as solver.max_new_tokens)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=SolverConfig.temperature,
        help="default: %(default)s, as solver.temperature",
    )
    add_model_options(parser, llm=WARMSTART_ALIAS)
    add_sandbox_options(parser)
    parser.add_argument("--out", required=True, help="directory for summary.json and puzzles.jsonl")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.puzzles import fewshot_puzzles
    from codeplay_lightning.setter.evaluation import evaluate_setter, sample_setter_puzzles
    from codeplay_lightning.solver import FewShotSolver, solver_sampling

    for flag, value in (("--attempts", args.attempts), ("--setter", args.setter), ("--limit", args.limit)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    examples = fewshot_puzzles()[: args.fewshot]
    config = SolverConfig(
        attempts=args.attempts,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
    )
    llm = load_model(args, solver_sampling(config), chat=False, batch_size=config.batch_size)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with sandbox(args) as box, progress() as bar:
        solver = FewShotSolver(llm, box, examples, config)
        if args.setter is not None:
            task = bar.add_task(f"the Setter writes {args.setter} puzzles", total=None)
            texts = sample_setter_puzzles(llm, examples, args.setter)
            bar.update(task, description=f"the Solver attempts them, {args.attempts} times each")
            summary, rows = evaluate_setter(texts, solver)
        else:
            summary, rows = _evaluate_solver(args, solver, bar)
    summary |= {"llm": args.llm, "attempts": args.attempts, "seconds": round(time.perf_counter() - started, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "puzzles.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    for key, value in summary.items():
        if key != "groups":
            print(f"  {key:<16} {value:.3f}" if isinstance(value, float) else f"  {key:<16} {value}")
    print(f"results written to {out} (summary.json, puzzles.jsonl)")
    return 0


def _evaluate_solver(args: argparse.Namespace, solver: FewShotSolver, bar: Progress) -> tuple[dict, list[dict]]:
    """The Solver's attempts at each puzzle of `--puzzles` (after `--split` and `--limit`): the summary and a row
    per puzzle with every attempt's program and verdict."""
    from codeplay_lightning.puzzles.files import puzzles_to_solve, read_puzzle_file, split_and_groups
    from codeplay_lightning.solver.evaluation import evaluate_solver

    for entry in read_puzzle_file(args.puzzles):
        if entry.error:
            console.print(f"[yellow]skipped:[/yellow] {entry.error}", highlight=False)
    puzzles = puzzles_to_solve(args.puzzles, args.split, args.limit, args.p3_split)
    _, groups = split_and_groups(args.puzzles)
    task = bar.add_task("solving", total=len(puzzles) * args.attempts)
    return evaluate_solver(puzzles, solver, groups, on_batch_done=lambda done, total: bar.update(task, completed=done))
