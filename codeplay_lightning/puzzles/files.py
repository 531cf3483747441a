"""Reading the puzzle files the CLI takes: JSONL of `{"name"?, "f", "g"?, "ans_type"?}` or a P3 `puzzles.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from codeplay_lightning.puzzles import Puzzle, load_p3, load_p3_split


@dataclass(frozen=True)
class Entry:
    """One line of a puzzle file: a puzzle with an optional candidate `g`, or why the line is unusable."""

    name: str
    puzzle: Puzzle | None
    g: str | None = None
    error: str = ""  # why the line is unusable; "" when it is usable


def read_puzzle_file(path: str | Path) -> list[Entry]:
    """Entries in file order. A P3 `puzzles.json` gives one entry per reference solution (and one
    with `g=None` for an instance that has none). Unreadable files raise ValueError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"cannot read {path}: not UTF-8 text") from None
    if text.lstrip().startswith("["):
        return [Entry(p.name, p, g) for p in load_p3(path) for g in (p.solutions or (None,))]
    return [_jsonl_entry(line, number) for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def _jsonl_entry(line: str, number: int) -> Entry:
    name = f"line {number}"
    try:
        record = json.loads(line)
    except ValueError as error:
        return Entry(name, None, error=f"line {number} is not JSON: {error}")
    if not isinstance(record, dict):
        return Entry(name, None, error=f"line {number} is not a JSON object")
    name = str(record.get("name") or name)
    fields = {key: record.get(key) for key in ("f", "g", "ans_type")}
    if not isinstance(fields["f"], str):
        return Entry(name, None, error=f"line {number} has no string field 'f'")
    for key in ("g", "ans_type"):
        if fields[key] is not None and not isinstance(fields[key], str):
            return Entry(name, None, error=f"line {number}: field {key!r} must be a string")
    return Entry(name, Puzzle(name, fields["f"], ans_type=fields["ans_type"]), fields["g"])


def split_and_groups(path: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """For a JSON puzzle list: each name's `split` (our corpus files have one) and its group (the corpus
    `family`, else P3's class, e.g. "Study_1" for "Study_1:0"). Empty maps for JSONL."""
    text = Path(path).read_text(encoding="utf-8")
    if not text.lstrip().startswith("["):
        return {}, {}
    entries = [entry for entry in json.loads(text) if isinstance(entry, dict) and isinstance(entry.get("name"), str)]
    splits = {e["name"]: e["split"] for e in entries if isinstance(e.get("split"), str)}
    groups = {e["name"]: str(e.get("family") or e["name"].split(":")[0]) for e in entries}
    return splits, groups


def puzzles_to_solve(
    path: str | Path, split: str | None = None, limit: int | None = None, p3_split: str | Path | None = None
) -> list[Puzzle]:
    """The distinct puzzles of a puzzle file (by name, in file order), only those of `split` when given, at most
    `limit`; the entries that are not puzzles are left out (see `read_puzzle_file`). The split is the entries'
    own (our corpus files have one), or with `p3_split` (P3's split.json) their class's in it."""
    entries = read_puzzle_file(path)
    splits, _ = split_and_groups(path)
    if p3_split is not None:
        part_of = {name: part for part, names in load_p3_split(p3_split).items() for name in names}
        splits = {e.name: part_of.get(e.name.split(":")[0], "neither") for e in entries}
    if split is not None:
        if not splits:
            raise ValueError(f"--split: {path} has no split field (a P3 puzzles.json takes --p3-split)")
        if split not in set(splits.values()):
            raise ValueError(f"--split {split!r}: {path} has the splits {sorted(set(splits.values()))}")
    puzzles = list(
        {e.name: e.puzzle for e in entries if not e.error and (split is None or splits.get(e.name) == split)}.values()
    )[:limit]
    if not puzzles:
        raise ValueError(f"{path} holds no usable puzzle")
    return puzzles
