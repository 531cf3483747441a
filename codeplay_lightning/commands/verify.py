"""`codeplay verify FILE`: judge every (f, g) pair of a file, write one verdict per pair, print the counts."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from codeplay_lightning.commands.args import add_sandbox_options, sandbox
from codeplay_lightning.commands.output import printable, progress

HELP = "check (f, g) pairs in the sandbox"
SHOWN_FAILURES = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="JSONL of {name?, f, g, ans_type?} or a P3 puzzles.json")
    add_sandbox_options(parser)
    parser.add_argument("--out", help="JSONL of verdicts (default: <file stem>.verdicts.jsonl here)")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.execution import Program, Verdict
    from codeplay_lightning.puzzles.files import read_puzzle_file

    entries = read_puzzle_file(args.file)
    pairs = [e for e in entries if e.g is not None or e.error]
    if not pairs:
        raise ValueError(f"{args.file} holds no (f, g) pair to verify ({len(entries)} puzzles without a solution)")
    programs = [Program(e.puzzle.f, e.g, e.puzzle.ans_type, e.name) for e in pairs if not e.error]
    out = Path(args.out) if args.out else Path(Path(args.file).stem + ".verdicts.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as handle:  # opened first: a bad --out fails before the batch, not after it
        started = time.perf_counter()
        with sandbox(args) as box, progress() as bar:
            isolation = f"{box.level}: {box.isolation}"
            task = bar.add_task("verifying", total=len(programs))
            verdicts = iter(box.verify(programs, on_verdict=lambda *_: bar.advance(task)))
        elapsed = time.perf_counter() - started
        counts: Counter[str] = Counter()
        failures = []
        for entry in pairs:
            verdict = Verdict("syntax", entry.error, 0.0) if entry.error else next(verdicts)
            counts[verdict.status] += 1
            if not verdict.passed:
                failures.append((entry.name, verdict))
            handle.write(
                json.dumps(
                    {
                        "name": entry.name,
                        "status": verdict.status,
                        "detail": verdict.detail,
                        "seconds": round(verdict.seconds, 6),
                    }
                )
                + "\n"
            )
    total = sum(counts.values())
    print(f"{total} pairs in {elapsed:.1f} s ({len(programs) / elapsed:.0f} verdicts/s), isolation: {isolation}")
    print("  " + "  ".join(f"{status}: {counts[status]}" for status in sorted(counts)))
    if total:
        print(f"  pass rate: {100 * counts['pass'] / total:.2f}%")
    skipped = len(entries) - len(pairs)
    if skipped:
        print(f"  {skipped} puzzles without a reference solution were skipped")
    for name, verdict in failures[:SHOWN_FAILURES]:
        last_line = verdict.detail.splitlines()[-1] if verdict.detail else ""
        print(f"  {verdict.status:8} {printable(name)}: {printable(last_line)}"[:160])
    if len(failures) > SHOWN_FAILURES:
        print(f"  ... {len(failures) - SHOWN_FAILURES} more in {out}")
    print(f"verdicts written to {out}")
    return 0
