"""P3's signature: an instance's constants as default arguments of `f`.

P3 writes `def sat(s: str, target="abc", n=5):`, and a solver must copy those constants into a `g()`
that takes no argument. Our families write their constants as the first statements of f's body
(`target = "abc"`); `constants_as_defaults` moves each leading assignment of a literal into the
signature, so the corpus teaches the reading P3 asks for. `f(answer)` means the same either way.
"""

from __future__ import annotations

import ast

from codeplay_lightning.puzzles.parsing import UNPARSABLE


def constants_as_defaults(f: str) -> str:
    """`f` with its leading `name = literal` (or `a, b = literal, literal`) statements as keyword
    parameters, in order, up to the first name the rest of the body assigns again; `f` unchanged when it
    opens with none, its parameters span lines or it is not a `def` with parameters that parses."""
    function = leading_def(f)
    if function is None or not function.args.args or function.args.args[-1].end_lineno != function.lineno:
        return f
    lines = f.splitlines()
    taken = {parameter.arg for parameter in function.args.args}
    defaults: list[str] = []
    body = function.body
    while len(body) > 1 and (pairs := _literal_assignments(body[0], lines)):
        names = {name for name, _ in pairs}
        if names & taken or names & rebound(body[1:]):
            break  # a parameter already, or a name the body changes: state, not a constant
        taken |= names
        defaults += [f"{name}={value}" for name, value in pairs]
        body = body[1:]
    if not defaults:
        return f
    header = lines[function.lineno - 1]
    cut = function.args.args[-1].end_col_offset
    return "\n".join([header[:cut] + ", " + ", ".join(defaults) + header[cut:], *lines[body[0].lineno - 1 :]])


def leading_def(source: str) -> ast.FunctionDef | None:
    """The first statement of `source` when it is a `def`; None when it is not or `source` does not parse."""
    try:
        body = ast.parse(source).body
    except UNPARSABLE:
        return None
    return body[0] if body and isinstance(body[0], ast.FunctionDef) else None


def _literal_assignments(statement: ast.stmt, lines: list[str]) -> list[tuple[str, str]]:
    """(name, source of its literal) for `name = literal` or `a, b = literal, literal`; [] otherwise."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return []
    target, value = statement.targets[0], statement.value
    if isinstance(target, ast.Name):
        names, values = [target], [value]
    elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        names, values = target.elts, value.elts
    else:
        return []
    if not all(isinstance(name, ast.Name) for name in names) or not all(map(_is_literal, values)):
        return []
    return [(name.id, source_on_one_line(lines, value)) for name, value in zip(names, values, strict=True)]


def rebound(statements: list[ast.stmt]) -> set[str]:
    """The names the statements assign to."""
    return {
        node.id
        for statement in statements
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)  # recurses once per bracket, and the parser allows 200 nested brackets
    except (ValueError, TypeError):  # TypeError: an unhashable key or element, as in {[1]: 2}
        return False
    return True


def source_on_one_line(lines: list[str], node: ast.expr) -> str:
    """The source of an expression, on one line (it may break inside brackets)."""
    source = lines[node.lineno - 1 : node.end_lineno]
    source[-1] = source[-1][: node.end_col_offset]
    source[0] = source[0][node.col_offset :]
    joined = source[0].rstrip()
    for line in source[1:]:
        joined += ("" if joined.endswith(("(", "[", "{")) else " ") + line.strip()
    return joined
