"""`codeplay actions CORPUS --per-action N --out FILE`: generate / improve / fix examples for the code search's
prompts, from training puzzles only (`sft/actions.py`), as JSONL for `codeplay sft`."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from codeplay_lightning.commands.args import add_sandbox_options, sandbox

HELP = "write examples of GIF-MCTS's generate, improve and fix prompts on training puzzles, for codeplay sft"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", help="our corpus JSON (its train split), or P3's puzzles.json with --p3-split")
    parser.add_argument("--p3-split", help="P3's split.json: only its train classes are used")
    parser.add_argument("--per-action", type=int, required=True, metavar="N", help="examples of each action")
    parser.add_argument(
        "--attempts",
        metavar="PUZZLES_JSONL",
        help="the puzzles.jsonl of `codeplay evaluate --puzzles CORPUS --split train`: its failed tries fill up "
        "to half of the improve and fix examples",
    )
    parser.add_argument("--seed", type=int, default=0)
    add_sandbox_options(parser)
    parser.add_argument("--out", required=True, help="the JSONL file to write")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.sft.actions import action_examples
    from codeplay_lightning.sft.data import training_puzzles

    if args.per_action < 1:
        raise ValueError(f"--per-action must be at least 1, got {args.per_action}")
    first_solutions: dict = {}  # a corpus instance comes once per solution: its family's first, then the enumerator's
    for puzzle in training_puzzles([args.corpus], args.p3_split):
        first_solutions.setdefault(puzzle.name, puzzle)
    puzzles = list(first_solutions.values())
    attempts = failed_attempts(Path(args.attempts)) if args.attempts else []
    started = time.perf_counter()
    with sandbox(args) as box:
        examples, stats = action_examples(puzzles, box, args.per_action, args.seed, attempts)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(asdict(example)) + "\n" for example in examples))
    print(f"{len(examples)} examples from {len(puzzles)} training puzzles in {time.perf_counter() - started:.1f} s:")
    for key, count in sorted(stats.items()):
        print(f"  {key:<36} {count}")
    print(f"written to {out}")
    return 0


def failed_attempts(path: Path) -> list[tuple[str, str]]:
    """(puzzle name, program) of every try that did not pass, from `codeplay evaluate`'s puzzles.jsonl."""
    attempts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            attempts += [(row["name"], attempt["g"]) for attempt in row["tries"] if attempt["status"] != "pass"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{path}, line {number}: not a row of codeplay evaluate's puzzles.jsonl") from None
    return attempts
