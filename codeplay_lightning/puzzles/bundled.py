"""Our own puzzle set, `bundled_puzzles.txt`, and the block format it is written in.

A block is a header line, then the source of one `def f` and one or more `def g` (its solutions):

    ### name: spelled_backwards | type: str | tags: fewshot
    def f(s: str):
        return s[::-1] == "stressed"

    def g():
        return "stressed"[::-1]

`tags` is optional; the only tag is `fewshot` (short puzzles for the prompts). Lines before the
first header are comments.
"""

from __future__ import annotations

import ast
from importlib import resources

from codeplay_lightning.puzzles.parsing import UNPARSABLE
from codeplay_lightning.puzzles.puzzle import Puzzle

_HEADER_START = "### "
_TAGS = {"fewshot"}


def bundled_puzzles() -> list[Puzzle]:
    """Every puzzle of the bundled set, in file order."""
    text = resources.files(__package__).joinpath("bundled_puzzles.txt").read_text(encoding="utf-8")
    return parse_puzzle_blocks(text, "bundled_puzzles.txt")


def fewshot_puzzles() -> list[Puzzle]:
    """The bundled puzzles tagged `fewshot`, in file order: the examples of the prompts."""
    return [puzzle for puzzle in bundled_puzzles() if "fewshot" in puzzle.tags]


def parse_puzzle_blocks(text: str, origin: str) -> list[Puzzle]:
    """The puzzles of a text in the block format; `origin` names the text in error messages."""
    lines = text.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith(_HEADER_START)]
    for index, line in enumerate(lines[: starts[0] if starts else len(lines)]):
        if line.strip() and not line.startswith("#"):
            raise ValueError(f"{origin} line {index + 1}: text before the first '###' header")
    puzzles: list[Puzzle] = []
    for start, end in zip(starts, starts[1:] + [len(lines)]):
        puzzle = _parse_block(lines, start, end, origin)
        if any(puzzle.name == seen.name for seen in puzzles):
            raise ValueError(f"{origin} line {start + 1}: duplicate name {puzzle.name!r}")
        puzzles.append(puzzle)
    return puzzles


def _parse_block(lines: list[str], start: int, end: int, origin: str) -> Puzzle:
    """The block whose header is `lines[start]` and whose source is `lines[start + 1 : end]`."""
    fields = _parse_header(lines[start], f"{origin} line {start + 1}")
    tags = tuple(fields.get("tags", "").split())
    if unknown := set(tags) - _TAGS:
        raise ValueError(f"{origin} line {start + 1}: unknown tags {sorted(unknown)}")
    body = lines[start + 1 : end]
    try:
        tree = ast.parse("\n".join(body))
    except SyntaxError as error:
        raise ValueError(f"{origin} line {start + 1 + (error.lineno or 0)}: {error.msg}") from None
    except UNPARSABLE:
        raise ValueError(f"{origin} line {start + 1}: nested too deeply to parse, or holds a null byte") from None
    names = [node.name if isinstance(node, ast.FunctionDef) and not node.decorator_list else None for node in tree.body]
    if len(names) < 2 or names[0] != "f" or any(name != "g" for name in names[1:]):
        raise ValueError(f"{origin} line {start + 1}: a block holds one 'def f' then one or more 'def g', nothing else")
    f, *solutions = ("\n".join(body[node.lineno - 1 : node.end_lineno]) for node in tree.body)
    return Puzzle(fields["name"], f, tuple(solutions), ans_type=fields["type"], tags=tags)


def _parse_header(header: str, where: str) -> dict[str, str]:
    fields = {}
    for field in header.removeprefix(_HEADER_START).split("|"):
        key, colon, value = (part.strip() for part in field.partition(":"))
        if not colon or key not in ("name", "type", "tags"):
            raise ValueError(f"{where}: expected 'name: ...', 'type: ...' or 'tags: ...', got {field.strip()!r}")
        fields[key] = value
    if not fields.get("name") or not fields.get("type"):
        raise ValueError(f"{where}: the header needs a name and a type")
    return fields
