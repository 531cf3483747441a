"""`codeplay sweep`: train the paper's presets one after another (resumable), then compare them."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from codeplay_lightning.commands.compare import print_comparison

HELP = "train the paper's presets one after another (resumable), then compare"
JEMALLOC = True  # under jemalloc, which its training runs inherit (allocator.py)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--presets",
        help="comma-separated configs/<preset>.yaml names (default: the paper's six, "
        "none,difficulty,novelty,balanced,novelty_biased,product)",
    )
    parser.add_argument("--run-root", default="runs", help="each preset trains into RUN_ROOT/<preset>/version_0")
    parser.add_argument("--out", default="docs/results", help="where compare writes figure.png and report.md")
    parser.add_argument("--seed", type=int, default=0, help="trainer.seed of every run, and the compare seed")
    parser.add_argument(
        "--iterations",
        type=int,
        help="trainer.iterations of every run (default: each preset's own, the CPU scale's 10)",
    )


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.experiments.sweep import PRESETS, sweep

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    presets = [preset.strip() for preset in args.presets.split(",") if preset.strip()] if args.presets else PRESETS
    result = sweep(presets, Path(args.run_root), Path(args.out), seed=args.seed, iterations=args.iterations)
    print_comparison(result["comparison"])
    return 0
