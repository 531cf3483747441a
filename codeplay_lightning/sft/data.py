"""Training text for supervised fine-tuning: puzzles in exactly the few-shot format of the prompts.

A training sequence is the Setter prompt's text for a run of puzzles (the `from typing import List`
header, then `f`, `g`, `assert f(g())` per puzzle), packed up to `block` tokens without cutting a
puzzle. A model trained on it learns both roles: after an `assert` comes a new `def f` (the Setter),
after `def g():` comes a solution (the Solver).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from codeplay_lightning.puzzles import Puzzle, in_classes, load_p3, load_p3_split, setter_prompt
from codeplay_lightning.puzzles.files import read_puzzle_file, split_and_groups


def training_puzzles(paths: Sequence[str | Path], p3_split: str | Path | None = None) -> list[Puzzle]:
    """One puzzle per (f, g) from each file. Our corpus JSON: its `train` split only. P3's
    `puzzles.json`: only the classes of the train split of `p3_split` (required: P3's test split is
    for evaluation). JSONL of `{f, g}`: every line with a g; a line that is not a puzzle is an error."""
    puzzles: list[Puzzle] = []
    for path in paths:
        text = _read(path)
        if text.lstrip().startswith("["):
            available = load_p3(path)
            splits, _ = split_and_groups(path)
            if splits:
                if len(splits) != len(available):
                    raise ValueError(f"{path}: some entries have a split and some do not")
                chosen = [p for p in available if splits[p.name] == "train"]
            elif p3_split is None:
                raise ValueError(
                    f"{path} is a P3 puzzles.json without splits: pass --p3-split split.json so "
                    "only its train split is trained on"
                )
            else:
                chosen = in_classes(available, load_p3_split(p3_split)["train"])
            # Our corpus: each of an instance's solutions (its family's and the enumerating one); P3: the first.
            puzzles += [
                Puzzle(p.name, p.f, (g,), p.ans_type)
                for p in chosen
                for g in (p.solutions if splits else p.solutions[:1])
            ]
        else:
            for entry in read_puzzle_file(path):
                if entry.problem or entry.g is None:
                    raise ValueError(f"{path}: {entry.problem or f'{entry.name} has no g'}")
                puzzles.append(Puzzle(entry.name, entry.puzzle.f, (entry.g,), entry.puzzle.ans_type))
    if not puzzles:
        raise ValueError("no training puzzles in " + ", ".join(map(str, paths)))
    return puzzles


def pack(tokenizer, puzzles: Sequence[Puzzle], block: int, seed: int) -> tuple[list[list[int]], int]:
    """Token sequences of at most `block` tokens, each the prompt text of consecutive puzzles of a
    seeded shuffle, and how many puzzles were left out because alone they exceed a block (a few of
    P3's, whose constants run to thousands of tokens)."""
    order = list(puzzles)
    random.Random(seed).shuffle(order)
    sequences: list[list[int]] = []
    run: list[Puzzle] = []
    too_long = 0
    for puzzle in order:
        if len(_ids(tokenizer, [puzzle])) > block:
            too_long += 1
            continue
        if run and len(_ids(tokenizer, [*run, puzzle])) > block:
            sequences.append(_ids(tokenizer, run))
            run = []
        run.append(puzzle)
    if run:
        sequences.append(_ids(tokenizer, run))
    return sequences, too_long


def _ids(tokenizer, run: Sequence[Puzzle]) -> list[int]:
    return tokenizer(setter_prompt(run), add_special_tokens=False)["input_ids"]


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
