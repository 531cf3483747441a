"""`codeplay synthesis-table DIR...`: the comparison table of `codeplay synthesize` runs, methods × seeds, at
several budgets from one run each (`experiments/synthesis_table.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "tabulate codeplay synthesize runs: solved fraction at budgets 4, 8, 16 with standard errors, per method"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="DIR", help="output directories of codeplay synthesize")
    parser.add_argument(
        "--budgets", type=int, nargs="+", default=[4, 8, 16], help="LLM calls per task (default: %(default)s)"
    )
    parser.add_argument("--title", default="Code synthesis", help="the table's heading")
    parser.add_argument("--out", help="also write the table to this markdown file")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.experiments.synthesis_table import load_runs, synthesis_table

    if min(args.budgets) < 1:
        raise ValueError(f"--budgets must be at least 1, got {min(args.budgets)}")
    table = synthesis_table(load_runs([Path(run) for run in args.runs]), sorted(set(args.budgets)), args.title)
    print(table, end="")
    if args.out:
        Path(args.out).write_text(table)
        print(f"written to {args.out}")
    return 0
