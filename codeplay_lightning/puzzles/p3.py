"""Loader for the P3 files of microsoft/PythonProgrammingPuzzles: `puzzles.json` and `split.json`.

P3 names its functions `sat` and `sol`; ours are `f` and `g`. The loader renames the definitions
and, when the source still mentions the old name (recursion, or a local variable of that name),
appends an alias line (`sol = g`) so that the code still runs.
"""

from __future__ import annotations

import io
import json
import tokenize
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from codeplay_lightning.puzzles.puzzle import Puzzle

_STRING_FIELDS = ("name", "sat", "ans_type", "sol_header")


def load_p3(path: str | Path) -> list[Puzzle]:
    """Every instance of a P3 `puzzles.json`, with `sat` as `f` and each `sol` body as a `g`."""
    entries = _read_json(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of puzzles, got {type(entries).__name__}")
    return [_to_puzzle(entry, f"{path}: entry {index}") for index, entry in enumerate(entries)]


def load_p3_split(path: str | Path) -> dict[str, list[str]]:
    """The class names of P3's `split.json`: `{"train": [...], "test": [...]}`."""
    split = _read_json(path)
    if not isinstance(split, dict) or set(split) != {"train", "test"}:
        raise ValueError(f'{path}: expected an object with exactly the keys "train" and "test"')
    for part, names in split.items():
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise ValueError(f"{path}: {part!r} must be a list of class names")
    return split


def puzzle_class(puzzle: Puzzle) -> str:
    """The P3 class of an instance: "Study_1" for "Study_1:0"."""
    return puzzle.name.split(":")[0]


def in_classes(puzzles: Sequence[Puzzle], class_names: Iterable[str]) -> list[Puzzle]:
    """The puzzles whose class is one of `class_names`, e.g. `load_p3_split(path)["train"]`."""
    wanted = set(class_names)
    return [puzzle for puzzle in puzzles if puzzle_class(puzzle) in wanted]


def _read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"{path}: cannot read: {error.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON: {error}") from None


def _to_puzzle(entry: Any, where: str) -> Puzzle:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected an object, got {type(entry).__name__}")
    for field in _STRING_FIELDS:
        if not isinstance(entry.get(field), str):
            raise ValueError(f"{where}: field {field!r} must be a string")
    where = f"{where} ({entry['name']})"
    bodies = entry.get("sol_bodies")
    if not isinstance(bodies, list) or not all(isinstance(body, str) for body in bodies):
        raise ValueError(f"{where}: field 'sol_bodies' must be a list of strings")
    f = _rename_def(entry["sat"], "sat", "f", where)
    solutions = tuple(_rename_def(entry["sol_header"] + "\n" + body, "sol", "g", where) for body in bodies)
    return Puzzle(name=entry["name"], f=f, solutions=solutions, ans_type=entry["ans_type"])


def _rename_def(source: str, old: str, new: str, where: str) -> str:
    header = f"def {old}("
    if not source.startswith(header):
        raise ValueError(f"{where}: expected source starting with {header!r}")
    renamed = f"def {new}(" + source[len(header) :]
    return f"{renamed}\n{old} = {new}" if _mentions(renamed, old, where) else renamed


def _mentions(source: str, name: str, where: str) -> bool:
    # Tokens, not `ast`: one P3 instance has an integer literal longer than Python 3.11's default
    # int_max_str_digits, which the parser rejects but the tokenizer does not.
    if name not in source:  # skips tokenizing almost every source: loading takes 10x less time
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as error:
        raise ValueError(f"{where}: cannot tokenize {name}: {error.args[0]}") from None
    return any(token.type == tokenize.NAME and token.string == name for token in tokens)
