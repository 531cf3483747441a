"""Validation of Setter outputs: is a text a puzzle, and if not, why not."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from codeplay_lightning.execution.warden import parse_answer_type
from codeplay_lightning.puzzles.puzzle import Puzzle


@dataclass(frozen=True)
class PuzzleCheck:
    """The verdict on one text: `puzzle` is set exactly when `valid`, `reason` exactly when not."""

    valid: bool
    reason: str | None
    puzzle: Puzzle | None


def check_puzzle(text: str, name: str = "") -> PuzzleCheck:
    """A text is a valid puzzle when it parses and defines a top-level `f` whose first positional
    argument (the answer) is annotated with a type the judge checks: bool, int, float, str, or
    `List[...]`/`list[...]` of them. Anything else could never be passed, so it is refused here."""
    try:
        annotation = _answer_arg(text).annotation
        if annotation is None:
            raise ValueError("f's answer has no type annotation (the judge checks bool, int, float, str "
                             "and List[...] of them)")
        parse_answer_type(ast.unparse(annotation))
    except ValueError as error:
        return PuzzleCheck(False, str(error), None)
    return PuzzleCheck(True, None, Puzzle(name=name, f=text.rstrip()))


def answer_type(puzzle: Puzzle) -> str | None:
    """The puzzle's explicit `ans_type`, else the annotation of f's first argument, else None."""
    if puzzle.ans_type is not None:
        return puzzle.ans_type
    try:
        annotation = _answer_arg(puzzle.f).annotation
    except ValueError as error:
        raise ValueError(f"puzzle {puzzle.name!r}: {error}") from None
    return None if annotation is None else ast.unparse(annotation)


def _answer_arg(source: str) -> ast.arg:
    """The first positional argument of the top-level `f`; ValueError says why there is none."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        line = f" (line {error.lineno})" if error.lineno is not None else ""
        raise ValueError(f"syntax error: {error.msg}{line}") from None
    except (RecursionError, MemoryError):  # CPython's parser reports deep nesting this way
        raise ValueError("syntax error: too deeply nested") from None
    # The last definition wins, as when Python runs the module.
    f_defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "f"]
    if not f_defs:
        raise ValueError("no function named f")
    positional = f_defs[-1].args.posonlyargs + f_defs[-1].args.args
    if not positional:
        raise ValueError("f takes no positional argument")
    return positional[0]
