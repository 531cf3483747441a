"""`codeplay bench`: the benchmarks of `benchmarks/`, which sits beside the package in a clone and is not part of
the wheel. The console script's sys.path lacks the clone, so it is found from the package's own location."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

HELP = "side-by-side benchmarks; prints ratios, writes JSON"
CHECKOUT = Path(__file__).resolve().parents[2]  # the directory holding codeplay_lightning/


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/bench.json")
    parser.add_argument("--pairs", type=int, default=3000, help="programs in the sandbox benchmark")
    parser.add_argument("--skip-model", action="store_true", help="only the sandbox benchmark")


def run(args: argparse.Namespace) -> int:
    clone_benchmarks().run_benchmarks(Path(args.out), pairs=args.pairs, with_model=not args.skip_model)
    return 0


def clone_benchmarks() -> ModuleType:
    """The `benchmarks` package beside `codeplay_lightning/`."""
    if not (CHECKOUT / "benchmarks" / "__init__.py").is_file():
        raise ValueError(
            f"codeplay bench runs from a clone of the repository: {CHECKOUT} has no benchmarks/ "
            "(an installed wheel does not ship them)"
        )
    sys.path.insert(0, str(CHECKOUT))
    import benchmarks

    return benchmarks
