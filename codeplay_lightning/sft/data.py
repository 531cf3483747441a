"""Training text for supervised fine-tuning: puzzles in exactly the few-shot format of the prompts, and
examples of the code search's actions in exactly its prompts.

A puzzle sequence is the Setter prompt's text for a run of puzzles (the `from typing import List`
header, then `f`, `g`, `assert f(g())` per puzzle), packed up to `block` tokens without cutting a
puzzle, every token trained on. A model trained on it learns both roles: after an `assert` comes a new
`def f` (the Setter), after `def g():` comes a solution (the Solver).

An action sequence is a run of (prompt, response) examples (`sft/actions.py`) as chat turns, through the
same chat template the search samples with (`llm.chat_text`); only the responses are trained on.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from codeplay_lightning.llm import chat_text
from codeplay_lightning.puzzles import Puzzle, in_classes, load_p3, load_p3_split, setter_prompt
from codeplay_lightning.puzzles.files import read_puzzle_file, split_and_groups
from codeplay_lightning.sft.actions import ACTIONS, ActionExample


class Packed(NamedTuple):
    """A training sequence: token ids, and the label of each (the id, or -100 where no loss is taken)."""

    ids: list[int]
    labels: list[int]


def training_data(
    paths: Sequence[str | Path], p3_split: str | Path | None = None
) -> tuple[list[Puzzle], list[ActionExample]]:
    """The puzzles of `training_puzzles` and the action examples of the JSONL files of
    `{action, prompt, response, ...}` rows (`codeplay actions` writes them) among `paths`."""
    puzzle_paths, examples = [], []
    for path in paths:
        rows = _action_rows(path)
        if rows is None:
            puzzle_paths.append(path)
            continue
        for number, row in enumerate(rows, 1):
            if row.get("action") not in ACTIONS or not all(isinstance(row.get(k), str) for k in ("prompt", "response")):
                raise ValueError(f"{path}, line {number}: not an action example {{action, prompt, response}}")
            examples.append(ActionExample(**row))
    if not examples and not puzzle_paths:
        raise ValueError("no training data in " + ", ".join(map(str, paths)))
    return (training_puzzles(puzzle_paths, p3_split) if puzzle_paths else []), examples


def _action_rows(path: str | Path) -> list[dict] | None:
    """The rows of a JSONL file of action examples, None for any other file (a corpus, P3, puzzles' JSONL)."""
    lines = [line for line in _read(path).splitlines() if line.strip()]
    try:
        first = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        return None
    if not isinstance(first, dict) or "prompt" not in first:
        return None
    try:
        return [json.loads(line) for line in lines]
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: a line is not JSON ({error.msg})") from None


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
                if entry.error or entry.g is None:
                    raise ValueError(f"{path}: {entry.error or f'{entry.name} has no g'}")
                puzzles.append(Puzzle(entry.name, entry.puzzle.f, (entry.g,), entry.puzzle.ans_type))
    if not puzzles:
        raise ValueError("no training puzzles in " + ", ".join(map(str, paths)))
    return puzzles


def pack(tokenizer, puzzles: Sequence[Puzzle], block: int, seed: int) -> tuple[list[Packed], int]:
    """Token sequences of at most `block` tokens, each the prompt text of consecutive puzzles of a
    seeded shuffle, and how many puzzles were left out because alone they exceed a block (a few of
    P3's, whose constants run to thousands of tokens)."""
    order = list(puzzles)
    random.Random(seed).shuffle(order)
    sequences: list[Packed] = []
    run: list[Puzzle] = []
    too_long = 0
    for puzzle in order:
        if len(_ids(tokenizer, [puzzle])) > block:
            too_long += 1
            continue
        if run and len(_ids(tokenizer, [*run, puzzle])) > block:
            sequences.append(_trained_whole(_ids(tokenizer, run)))
            run = []
        run.append(puzzle)
    if run:
        sequences.append(_trained_whole(_ids(tokenizer, run)))
    return sequences, too_long


def _trained_whole(ids: list[int]) -> Packed:
    return Packed(ids, list(ids))


def pack_examples(tokenizer, examples: Sequence[ActionExample], block: int, seed: int) -> tuple[list[Packed], int]:
    """Sequences of at most `block` tokens, each the chat turns of consecutive examples of a seeded shuffle with
    the loss on the responses only (up to and including the end-of-turn token), and how many examples alone
    exceed a block."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    sequences: list[Packed] = []
    too_long = 0
    for example in order:
        ids, labels = _chat_turn(tokenizer, example)
        if len(ids) > block:
            too_long += 1
        elif sequences and len(sequences[-1].ids) + len(ids) <= block:
            sequences[-1].ids.extend(ids)
            sequences[-1].labels.extend(labels)
        else:
            sequences.append(Packed(ids, labels))
    return sequences, too_long


def _chat_turn(tokenizer, example: ActionExample) -> tuple[list[int], list[int]]:
    prompt = chat_text(tokenizer, example.prompt)
    conversation = [{"role": "user", "content": example.prompt}, {"role": "assistant", "content": example.response}]
    whole = tokenizer.apply_chat_template(conversation, tokenize=False)
    if not whole.startswith(prompt):
        raise ValueError("the tokenizer's chat template does not extend the prompt's text with the response")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(whole[len(prompt) :], add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id in response_ids:  # what follows the end of the turn is never sampled
        response_ids = response_ids[: response_ids.index(tokenizer.eos_token_id) + 1]
    return prompt_ids + response_ids, [-100] * len(prompt_ids) + response_ids


def _ids(tokenizer, run: Sequence[Puzzle]) -> list[int]:
    return tokenizer(setter_prompt(run), add_special_tokens=False)["input_ids"]


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
