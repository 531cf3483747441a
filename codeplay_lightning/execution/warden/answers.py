"""An answer as data: P3's answer types, and the JSON text an answer travels as between processes."""

import json
import sys

ANSWER_BYTES = 1 << 23  # an answer (or a call's value) travels as ASCII JSON text of at most this many bytes
ANSWER_DEPTH = 100  # and nests at most this deep
P3_BASE_TYPES = {"bool": bool, "int": int, "float": float, "str": str}
JSON_TYPES = {type(None), bool, int, float, str, list, dict}


def parse_answer_type(text: str) -> tuple[type, int]:
    """(base type, list depth) of a P3 answer type: bool, int, float or str inside nested
    `List[...]` or `list[...]`. ValueError names what the judge cannot check."""
    depth, inner = 0, "".join(text.split())
    while depth <= ANSWER_DEPTH and inner.startswith(("List[", "list[", "typing.List[")) and inner.endswith("]"):
        inner, depth = inner[inner.index("[") + 1 : -1], depth + 1
    if inner not in P3_BASE_TYPES:
        raise ValueError(
            f"unsupported answer type {text!r}: the judge checks bool, int, float, str "
            "and List[...] of them (with the element type)"
        )
    return P3_BASE_TYPES[inner], depth


def answer_type_of(f: str, ans_type: str | None) -> str:
    """A program's answer type: `ans_type`, else f's first annotation, else "" for any JSON answer (also where f
    cannot be parsed: compiling it says why); ValueError for a type the judge cannot check. Read by the warden (of a
    short f) or by a process of the program's own (`programs.read_answer_type`), so that g's process never receives
    f."""
    answer_type = ans_type
    if answer_type is None:
        try:
            answer_type = answer_annotation(f)
        except ValueError:
            answer_type = None
    if answer_type:
        parse_answer_type(answer_type)
    return answer_type or ""


def answer_annotation(source: str) -> str | None:
    """The source text of the annotation of the first positional argument of the last top-level
    `def f` (None if it has none); ValueError says why there is no such argument. Bounded on any
    input: the parser reports deep nesting as an exception, and the text is cut from the source
    rather than rebuilt from the tree (which recurses as deep as the expression nests)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        line = f" (line {error.lineno})" if error.lineno is not None else ""
        raise ValueError(f"syntax error: {error.msg}{line}") from None
    except (RecursionError, MemoryError, ValueError):  # deep nesting; null bytes
        raise ValueError("syntax error: nested too deeply to parse") from None
    definitions = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "f"]
    if not definitions:  # the last definition wins, as when Python runs the module
        raise ValueError("no function named f")
    positional = definitions[-1].args.posonlyargs + definitions[-1].args.args
    if not positional:
        raise ValueError("f takes no positional argument")
    annotation = positional[0].annotation
    return None if annotation is None else _source_text(source, annotation)


def _source_text(source: str, node) -> str:
    """The source of an expression node, cut by its positions (byte offsets into its lines), in
    time linear in the source (`ast.get_source_segment` is quadratic in a line's length)."""
    import re

    lines = re.split("\r\n|\r|\n", source)[node.lineno - 1 : node.end_lineno]  # the parser's line breaks
    if len(lines) == 1:
        return lines[0].encode()[node.col_offset : node.end_col_offset].decode()
    first, last = lines[0].encode()[node.col_offset :].decode(), lines[-1].encode()[: node.end_col_offset].decode()
    return "\n".join([first, *lines[1:-1], last])


def type_matches(answer, answer_type: tuple[type, int]) -> bool:
    """P3's answer check: exact types (no subclasses), lists nested to exactly the type's depth."""
    base, depth = answer_type
    level, values = 0, [answer]
    while level < depth:
        if not all(type(value) is list for value in values):
            return False
        values, level = [item for value in values for item in value], level + 1
    return all(type(value) is base for value in values)


def encode_answer(answer, answer_type: str = "") -> str:
    """The answer as JSON text. Only exact JSON types leave a runner (a tuple is not a list
    here, as it is not in P3), nested at most ANSWER_DEPTH deep; TypeError or ValueError else.
    The ints of an int-typed answer travel as hex strings: converting a huge int to decimal takes
    quadratic time (P3 has answers of 80 MB in decimal), to hex linear."""
    stack, containers = [(answer, 0)], 0
    while stack:
        value, depth = stack.pop()
        containers += 1
        if depth > ANSWER_DEPTH or containers > ANSWER_BYTES:  # also how a list that holds itself ends
            raise ValueError(f"the answer nests deeper than {ANSWER_DEPTH} levels or is too large")
        if type(value) is dict:
            if not all(type(key) is str for key in value):
                raise TypeError("a dict answer needs str keys")
            value = list(value.values())
        elif type(value) is not list:
            value = [value]
            depth -= 1
        kinds = set(map(type, value))  # element types at C speed: a long list of numbers stays cheap
        if not kinds <= JSON_TYPES:
            kind = next(kind for kind in kinds if kind not in JSON_TYPES)
            raise TypeError(
                f"an answer of type {kind.__name__} cannot be judged: answers are None, "
                "bool, int, float, str, list and dict (str keys)"
            )
        if list in kinds or dict in kinds:
            stack.extend((item, depth + 1) for item in value if type(item) in (list, dict))
    base, depth = parse_answer_type(answer_type) if answer_type else (None, 0)
    if base is int:
        answer = _map_leaves(answer, depth, hex)
    text = json.dumps(answer)
    if len(text) > ANSWER_BYTES:
        raise ValueError(f"the answer is {len(text)} bytes as JSON (at most {ANSWER_BYTES})")
    return text


def encode_shared(answer, answer_type: str = "") -> tuple[str, str]:
    """A runner's answer as (JSON text, its shared places): where the answer holds a list or dict again that it
    already holds (two places, or a list that holds itself), the JSON holds null, and the shared places, a JSON
    list of [place, place of the first], say which; "" when nothing repeats. The judge then gets back the same
    aliasing P3's judge gives f (`decode_shared`); the identity of equal immutable values (two equal strings, two
    equal large ints) is not kept: no value's identity is part of the value."""
    shared = shared_containers(answer)
    if not shared:
        return encode_answer(answer, answer_type), ""
    places = {tuple(path) for path, _ in shared}
    return encode_answer(_with_placeholders(answer, (), places), answer_type), json.dumps(shared)


def shared_containers(answer) -> list[list[list]]:
    """[place, place of its first occurrence] of every list or dict the answer holds more than once, in a depth-first
    walk that never enters one twice; a place is the list of indices and keys from the answer to it."""
    seen = {id(answer): []}
    shared, stack = [], [(answer, [])]
    while stack:
        value, path = stack.pop()
        if type(value) is dict:
            items = value.items()
        elif type(value) is list and {list, dict} & set(map(type, value)):  # (a list of numbers stays cheap)
            items = enumerate(value)
        else:
            continue
        for key, item in items:
            if type(item) in (list, dict):
                if id(item) in seen:
                    shared.append([[*path, key], seen[id(item)]])
                else:
                    seen[id(item)] = [*path, key]
                    stack.append((item, [*path, key]))
    return shared


def _with_placeholders(value, path: tuple, places: set):
    """A copy of the answer's lists and dicts with None at `places`."""
    if len(path) > ANSWER_DEPTH:
        raise ValueError(f"the answer nests deeper than {ANSWER_DEPTH} levels")
    if type(value) is list:
        return [
            None if (*path, index) in places else _with_placeholders(item, (*path, index), places)
            for index, item in enumerate(value)
        ]
    if type(value) is dict:
        return {
            key: None if (*path, key) in places else _with_placeholders(item, (*path, key), places)
            for key, item in value.items()
        }
    return value


def decode_shared(text: str, shared: str, answer_type: str = ""):
    """The answer from `encode_shared`'s text and shared places, with its lists and dicts shared again; ValueError
    for places that are not places of this answer (they come from g's process)."""
    answer = decode_answer(text)
    if shared:
        for place, first in json.loads(shared):
            if len(place) > ANSWER_DEPTH or len(first) > ANSWER_DEPTH or not place:
                raise ValueError("a shared place deeper than the answer can be")
            _at(answer, place[:-1])[place[-1]] = _at(answer, first)
    base, depth = parse_answer_type(answer_type) if answer_type else (None, 0)
    return _from_hex_in_place(answer, depth, set()) if base is int else answer


def _at(answer, place: list):
    """The list or dict at `place` in the answer; ValueError where there is none."""
    value = answer
    for key in place:
        if not (type(value) is list and type(key) is int and 0 <= key < len(value)) and not (
            type(value) is dict and type(key) is str and key in value
        ):
            raise ValueError("a shared place outside the answer")
        value = value[key]
    if type(value) not in (list, dict):
        raise ValueError("a shared place that is not a list or dict")
    return value


def _from_hex_in_place(value, depth: int, converted: set):
    """The int-typed answer's hex strings made ints, in its own lists (each once: lists may be shared)."""
    if depth == 0:
        return _from_hex(value)
    if type(value) is not list:
        raise ValueError("a list level of the answer's type is not a list")
    if id(value) not in converted:
        converted.add(id(value))
        for index, item in enumerate(value):
            value[index] = _from_hex_in_place(item, depth - 1, converted)
    return value


def decode_answer(text: str, answer_type: str = ""):
    """The answer from its JSON text (see `encode_answer`); nesting beyond ANSWER_DEPTH is a
    RecursionError, raised by the decoder's own depth check before it can exhaust the C stack."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + ANSWER_DEPTH + 20)
    try:
        answer = json.loads(text)
    finally:
        sys.setrecursionlimit(limit)
    base, depth = parse_answer_type(answer_type) if answer_type else (None, 0)
    if base is int:
        answer = _map_leaves(answer, depth, _from_hex)
    return answer


def _from_hex(text) -> int:
    if type(text) is not str:
        raise ValueError("an int that did not travel as hex")
    return int(text, 16)


def _map_leaves(value, depth: int, function):
    """`value` with `function` applied to the items at list depth `depth`; ValueError where a
    level that should be a list is not (but None, `encode_shared`'s placeholder of a list)."""
    if depth == 0:
        return function(value)
    if value is None:
        return None
    if type(value) is not list:
        raise ValueError("a list level of the answer's type is not a list")
    return [_map_leaves(item, depth - 1, function) for item in value]
