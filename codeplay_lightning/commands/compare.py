"""`codeplay compare RUN_DIR... --out DIR [--iterations N] [--plan FILE]`: the paper's figure 2 and appendix C from
training runs, and the pre-registered tests of a plan."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "the paper's figure 2 and appendix C from training runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="runs/<preset>/version_N directories")
    parser.add_argument("--out", required=True, help="directory for figure.png and report.md")
    parser.add_argument("--seed", type=int, default=0, help="seeds the appendix's puzzle samples")
    parser.add_argument(
        "--iterations",
        type=_positive,
        metavar="N",
        help="compare each run's first N iterations only (runs of different lengths over the same iterations)",
    )
    parser.add_argument(
        "--plan",
        metavar="FILE",
        help="pre-registered endpoints (YAML, as docs/results/plan-50.yaml) to test over seeds, Holm-corrected",
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of iterations (1 or more)")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.experiments.compare import compare

    print_comparison(
        compare(
            [Path(run) for run in args.runs],
            Path(args.out),
            seed=args.seed,
            iterations=args.iterations,
            plan=None if args.plan is None else Path(args.plan),
        )
    )
    return 0


def print_comparison(result: dict) -> None:
    for run in result["runs"]:
        final = "  ".join(f"{key}={'-' if value is None else f'{value:.3f}'}" for key, value in run["final"].items())
        print(f"{run['label']}: {run['puzzles']} puzzles  {final}")
        for note in run["notes"]:
            print(f"  note: {note}")
    print(f"figure: {result['figure']}\nreport: {result['report']}")
    if result["selfplay"] is not None:
        print(f"self-play figure: {result['selfplay']['figure']}")
