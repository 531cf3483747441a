"""A second, general solution: try every candidate answer in order against f's own test.

A family's reference `g` teaches that family's method; this one teaches a method that carries over to
puzzles never seen. `enumerating_solution(f)` writes it from f's text alone: f's default arguments as
assignments and the statements of f that do not read the answer come first, then a loop over the
candidates that runs the rest of f's body and returns the first one for which f's final expression
holds. The candidates of an `int` answer are 0, 1, 2, ...; those of a `str` answer are the strings over
the characters of f's string constants, shortest first (`itertools.product`), since a text f tests
is most often made of the letters it names. The loop costs as many steps as candidates precede the
answer, so the corpus keeps it only when it passes in the sandbox's time limit.
"""

from __future__ import annotations

import ast

from codeplay_lightning.corpus.signature import leading_def, rebound, source_on_one_line
from codeplay_lightning.puzzles.parsing import answer_type
from codeplay_lightning.puzzles.puzzle import Puzzle

ENUMERATION_BOUND = "10 ** 6"
LENGTH_BOUND = 20  # longest string tried; the sandbox's time limit most often ends the search sooner


def enumerating_solution(f: str) -> str | None:
    """The enumerating `g` for an `f` whose answer is an `int`, or a `str` and f has string constants,
    whose other parameters all have defaults and whose body ends in `return`; None for any other `f`."""
    function = leading_def(f)
    if function is None or function.name != "f":
        return None
    parameters, defaults = function.args.args, function.args.defaults
    if (
        len(defaults) != len(parameters) - 1
        or not isinstance(function.body[-1], ast.Return)
        or function.body[-1].value is None
    ):
        return None
    loop = _candidate_loop(function, answer_type(Puzzle("f", f)))
    if loop is None:
        return None
    imports, candidates = loop
    name, lines, body = parameters[0].arg, f.splitlines(), function.body[:-1]
    bound = [rebound([statement]) for statement in body]
    if any(name in names for names in bound):
        return None  # f changes its argument: the loop could not return the candidate it tried
    before, inside = [], []
    assigned = set().union(*bound)
    for parameter, default in zip(parameters[1:], defaults, strict=True):
        # A default the body changes must start afresh for every candidate, as on every call of f.
        (inside if parameter.arg in assigned else before).append(
            f"    {parameter.arg} = {source_on_one_line(lines, default)}"
        )
    for index, statement in enumerate(body):
        text = lines[statement.lineno - 1 : statement.end_lineno]
        reads_answer = any(isinstance(node, ast.Name) and node.id == name for node in ast.walk(statement))
        rebound_later = any(bound[index] & later for later in bound[index + 1 :])
        # Once one statement stays in the loop, the rest may depend on it: they stay there too.
        (inside if reads_answer or rebound_later or inside else before).extend(text)
    condition = source_on_one_line(lines, function.body[-1].value)
    return "\n".join(
        [
            "def g():",
            *imports,
            *before,
            f"    for {name} in {candidates}:",
            *("    " + line for line in inside),
            f"        if {condition}:",
            f"            return {name}",
        ]
    )


def _candidate_loop(function: ast.FunctionDef, ans_type: str | None) -> tuple[list[str], str] | None:
    """The import lines the loop needs and the expression it draws candidates from; None for an answer
    type without candidates."""
    if ans_type == "int":
        return [], f"range({ENUMERATION_BOUND})"
    if ans_type != "str":
        return None
    letters = "".join(
        sorted(
            {
                character
                for node in ast.walk(function)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
                for character in node.value
            }
        )
    )
    if not letters or not letters.isprintable() or '"' in letters or "\\" in letters:
        return None
    return (
        ["    from itertools import product"],
        f'("".join(p) for n in range(1, {LENGTH_BOUND}) for p in product("{letters}", repeat=n))',
    )
