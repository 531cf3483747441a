"""`codeplay corpus --n N --out FILE`: our own puzzle families' instances, each verified in the sandbox."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from codeplay_lightning.commands.args import add_workers_option

HELP = "write our own puzzle corpus, verified in the sandbox, as P3 JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, required=True, help="instances in all (train and held-out)")
    parser.add_argument("--seed", type=int, default=0)
    add_workers_option(parser)
    parser.add_argument("--out", required=True, help="the P3-format JSON file to write")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.corpus import FAMILIES, HELDOUT_FAMILIES
    from codeplay_lightning.corpus.build import CORPUS_TIMEOUT, build_corpus
    from codeplay_lightning.execution import Sandbox

    if args.n < 1:
        raise ValueError(f"--n must be at least 1, got {args.n}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with Sandbox(workers=args.workers, timeout=CORPUS_TIMEOUT) as sandbox:
        entries, lost = build_corpus(FAMILIES, HELDOUT_FAMILIES, args.n, args.seed, sandbox)
    out.write_text(json.dumps(entries, indent=1) + "\n")
    splits = Counter(entry["split"] for entry in entries)
    print(
        f"{len(entries)} verified puzzles from {len(FAMILIES)} families in {time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{name} {count}" for name, count in sorted(splits.items()))
    )
    if lost:
        most = ", ".join(f"{reason} {count}" for reason, count in lost.most_common(5))
        print(f"  dropped by verification: {sum(lost.values())} ({most})")
    print(f"written to {out}")
    return 0
