"""`python -m benchmarks` (`make bench`): every benchmark, its ratios printed, its numbers written as JSON. The
benchmarks sit beside the package in a clone, outside the wheel: run this from the clone's root."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import run_benchmarks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/bench.json"))
    parser.add_argument("--pairs", type=int, default=3000, help="programs in the sandbox benchmark")
    parser.add_argument("--skip-model", action="store_true", help="only the sandbox benchmark")
    args = parser.parse_args(argv)
    run_benchmarks(args.out, pairs=args.pairs, with_model=not args.skip_model)


if __name__ == "__main__":
    main()
