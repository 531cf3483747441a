"""What runs inside a program process: compiling a source, running g, judging f on an answer, calling a function."""

import builtins
import reprlib
import sys
import traceback

from .answers import ANSWER_DEPTH, decode_answer, encode_answer, parse_answer_type, type_matches


class CappedOutput:
    """Stands in for sys.stdout/sys.stderr: keeps the first `limit` characters, drops the rest."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0

    def write(self, text) -> int:
        text = str(text)
        room = self.limit - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def flush(self) -> None:
        pass

    def value(self) -> str:
        tail = f"\n[... {self.dropped} more characters dropped]" if self.dropped else ""
        return "".join(self.parts) + tail


class ProgramError(Exception):
    """A verdict reached before the program's function could be called."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def compile_source(source: str, name: str):
    """The code object of a source that should define `name`. Compiling runs none of it, so the
    warden does it, and its children inherit the code. No future flags are inherited from here:
    annotations stay evaluated, as in P3."""
    try:
        return compile(source, f"<{name}>", "exec", dont_inherit=True)
    except SyntaxError as error:
        raise ProgramError("syntax", f"{name}: {error.msg} (line {error.lineno})") from None
    except Exception as error:  # noqa: BLE001 - null bytes, absurd nesting, the compiler's own limits
        raise ProgramError("syntax", f"{name}: {type(error).__name__}: {str(error)[:200]}") from None


def compile_puzzle(f: str, ans_type: str | None) -> tuple:
    """(f's code, its answer type: `ans_type`, else f's first annotation, else "" for any JSON);
    ProgramError when f does not compile or its answer type is not one the judge checks."""
    code, answer_type = compile_source(f, "f"), ans_type
    if answer_type is None:
        try:
            answer_type = answer_annotation(f)
        except ValueError:  # no f to take it from: running f's source says so
            answer_type = None
    answer_type = answer_type or ""
    if answer_type:
        try:
            parse_answer_type(answer_type)
        except ValueError as error:
            raise ProgramError("error", str(error)) from None
    return code, answer_type


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


def instantiate(code, name: str):
    """Run a compiled source in fresh globals (builtins and `List`, as P3's judge gives them)."""
    namespace = {"__builtins__": builtins, "__name__": "__puzzle__", "List": sys.modules["typing"].List}
    exec(code, namespace)
    function = namespace.get(name)
    if not callable(function):
        raise ProgramError("syntax", f"the {name} source defines no function {name}")
    return function


def safe_repr(value) -> str:
    try:
        return reprlib.repr(value)
    except BaseException:  # noqa: BLE001 - a program's object whose __repr__ raises
        return f"<unprintable {type(value).__name__}>"


def describe(error: BaseException, name: str, source: str, frames: int = 4) -> str:
    """`Type: message` plus the last frames inside the program itself, with their source lines."""
    try:
        code_lines, lines = source.splitlines(), []
        for frame in traceback.extract_tb(error.__traceback__):
            if frame.filename == f"<{name}>":
                text = code_lines[frame.lineno - 1].strip() if 0 < (frame.lineno or 0) <= len(code_lines) else ""
                lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n    {text[:200]}')
        try:
            message = f"{type(error).__name__}: {str(error)[:1000]}"
        except BaseException:  # noqa: BLE001 - an exception whose __str__ raises
            message = f"{type(error).__name__}: <unprintable>"
        return "\n".join(
            ["Traceback (program frames, most recent call last):", *lines[-frames:], message] if lines else [message]
        )
    except BaseException:  # noqa: BLE001 - the program broke what describing needs
        return "an error that could not be described"


def run_g(code, source: str, answer_type: str) -> list[str]:
    """Runs in a runner: ["answer", JSON text, repr of the answer], or [status, detail, repr of the
    answer or ""] when g gave no answer to judge."""
    try:
        answer = instantiate(code, "g")()
        if answer_type and not type_matches(answer, parse_answer_type(answer_type)):
            return ["fail", f"answer {safe_repr(answer)} is not of type {answer_type}", safe_repr(answer)]
        return ["answer", encode_answer(answer, answer_type), safe_repr(answer)]
    except ProgramError as error:
        return [error.status, error.detail, ""]
    except MemoryError as error:
        return ["memory", describe(error, "g", source), ""]
    except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, anything g raises
        return ["error", describe(error, "g", source), ""]


def judge_answer(code, source: str, answer_type: str, text: str) -> list[str]:
    """Runs in a judge: [status, detail, repr of the answer, repr of what f returned] for f on the
    answer that `text` encodes ("" where there is none)."""
    try:
        answer = decode_answer(text, answer_type)
    except RecursionError:
        return ["error", f"the answer nests deeper than {ANSWER_DEPTH} levels", "", ""]
    except ValueError as error:
        return ["error", f"the answer is not JSON: {str(error)[:200]}", "", ""]
    shown = safe_repr(answer)
    if answer_type and not type_matches(answer, parse_answer_type(answer_type)):
        return ["fail", f"answer {shown} is not of type {answer_type}", shown, ""]
    try:
        result = instantiate(code, "f")(answer)
        if result is True:
            return ["pass", "", shown, "True"]
        return ["fail", f"f returned {safe_repr(result)} for x = {shown}", shown, safe_repr(result)]
    except ProgramError as error:
        return [error.status, error.detail, shown, ""]
    except MemoryError as error:
        return ["memory", describe(error, "f", source), shown, ""]
    except BaseException as error:  # noqa: BLE001
        return ["error", describe(error, "f", source), shown, ""]


def call_function(code, source: str, name: str, text: str) -> list[str]:
    """Runs in a caller: the program's module, then `name(input)` on the input `text` encodes:
    ["returned", "", the JSON text of the result], or [status, detail, ""] when the program or the
    call raised or returned something that is not JSON data."""
    try:
        namespace = {"__builtins__": builtins, "__name__": "__program__"}
        exec(code, namespace)
        function = namespace.get(name)
        if not callable(function):
            return ["error", f"the program defines no function {name}", ""]
        return ["returned", "", encode_answer(function(decode_answer(text)))]
    except MemoryError as error:
        return ["memory", describe(error, "program", source), ""]
    except BaseException as error:  # noqa: BLE001
        return ["error", describe(error, "program", source), ""]
