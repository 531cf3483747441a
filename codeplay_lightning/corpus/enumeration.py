"""A second, general solution for puzzles over the natural numbers: try 0, 1, 2, ... against f's own test.

A family's reference `g` teaches that family's method; this one teaches a method that carries over to
puzzles never seen. `enumerating_solution(f)` writes it from f's text alone: f's default arguments as
assignments and the statements of f that do not read the answer come first, then a loop over
`range(ENUMERATION_BOUND)` that runs the rest of f's body and returns the first number for which f's
final expression holds. The loop costs as many
steps as the answer is large, so the corpus keeps it only when it passes in the sandbox's time limit.
"""

from __future__ import annotations

import ast

from codeplay_lightning.corpus.signature import rebound, source_on_one_line
from codeplay_lightning.puzzles.parsing import answer_type
from codeplay_lightning.puzzles.puzzle import Puzzle

ENUMERATION_BOUND = "10 ** 6"


def enumerating_solution(f: str) -> str | None:
    """The enumerating `g` for an `f` whose answer is an `int`, whose other parameters all have defaults
    and whose body ends in `return`; None for any other `f`."""
    function = ast.parse(f).body[0]
    if not isinstance(function, ast.FunctionDef):
        return None
    parameters, defaults = function.args.args, function.args.defaults
    if (len(defaults) != len(parameters) - 1 or answer_type(Puzzle("f", f)) != "int"
            or not isinstance(function.body[-1], ast.Return) or function.body[-1].value is None):
        return None
    name, lines, body = parameters[0].arg, f.splitlines(), function.body[:-1]
    bound = [rebound([statement]) for statement in body]
    if any(name in names for names in bound):
        return None  # f changes its argument: the loop could not return the number it tried
    before, inside = [], []
    assigned = set().union(*bound)
    for parameter, default in zip(parameters[1:], defaults, strict=True):
        # A default the body changes must start afresh for every number tried, as on every call of f.
        (inside if parameter.arg in assigned else before).append(
            f"    {parameter.arg} = {source_on_one_line(lines, default)}")
    for index, statement in enumerate(body):
        text = lines[statement.lineno - 1: statement.end_lineno]
        reads_answer = any(isinstance(node, ast.Name) and node.id == name for node in ast.walk(statement))
        rebound_later = any(bound[index] & later for later in bound[index + 1:])
        # Once one statement stays in the loop, the rest may depend on it: they stay there too.
        (inside if reads_answer or rebound_later or inside else before).extend(text)
    condition = source_on_one_line(lines, function.body[-1].value)
    return "\n".join(["def g():", *before, f"    for {name} in range({ENUMERATION_BOUND}):",
                      *("    " + line for line in inside),
                      f"        if {condition}:", f"            return {name}"])

