"""Validation of Setter outputs: is a text a puzzle, and if not, why not."""

from __future__ import annotations

from dataclasses import dataclass

from codeplay_lightning.execution.warden.answers import answer_annotation, parse_answer_type
from codeplay_lightning.puzzles.puzzle import Puzzle

# What ast.parse raises on text it cannot read: SyntaxError, ValueError (a null byte, before Python 3.12),
# RecursionError or MemoryError (nesting past the parser's stack).
UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)


@dataclass(frozen=True)
class PuzzleCheck:
    """The verdict on one text: `puzzle` is set exactly when `valid`, `reason` exactly when not."""

    valid: bool
    reason: str | None
    puzzle: Puzzle | None


def check_puzzle(text: str, name: str = "") -> PuzzleCheck:
    """A text is a valid puzzle when it parses and defines a top-level `f` whose first positional
    argument (the answer) is annotated with a type the judge checks: bool, int, float, str, or
    `List[...]`/`list[...]` of them. Anything else could never be passed, so it is refused here.
    The annotation is read as the sandbox reads it (`answer_annotation`), without recursion."""
    try:
        annotation = answer_annotation(text)
        if annotation is None:
            raise ValueError(
                "f's answer has no type annotation (the judge checks bool, int, float, str and List[...] of them)"
            )
        parse_answer_type(annotation)
    except ValueError as error:
        return PuzzleCheck(False, str(error), None)
    return PuzzleCheck(True, None, Puzzle(name=name, f=text.rstrip()))


def answer_type(puzzle: Puzzle) -> str | None:
    """The puzzle's explicit `ans_type`, else the annotation of f's first argument without whitespace
    (`List[ int ]` gives "List[int]", the form callers compare), else None."""
    if puzzle.ans_type is not None:
        return puzzle.ans_type
    try:
        annotation = answer_annotation(puzzle.f)
    except ValueError as error:
        raise ValueError(f"puzzle {puzzle.name!r}: {error}") from None
    return None if annotation is None else "".join(annotation.split())
