"""What runs inside a program process: compiling a source, running g, judging f on an answer, calling a function."""

import builtins
import marshal
import reprlib
import sys
import traceback

from .answers import (
    ANSWER_DEPTH,
    answer_type_of,
    decode_answer,
    decode_shared,
    encode_answer,
    encode_shared,
    parse_answer_type,
    type_matches,
)


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
    """The code object of a source that should define `name` (compiling runs none of it). No future flags are
    inherited from here: annotations stay evaluated, as in P3."""
    try:
        return compile(source, f"<{name}>", "exec", dont_inherit=True)
    except SyntaxError as error:
        raise ProgramError("syntax", f"{name}: {error.msg} (line {error.lineno})") from None
    except Exception as error:  # noqa: BLE001 - null bytes, absurd nesting, the compiler's own limits
        raise ProgramError("syntax", f"{name}: {type(error).__name__}: {str(error)[:200]}") from None


def instantiate(code, name: str):
    """Run a compiled source in fresh globals (builtins and `List`, as P3's judge gives them)."""
    namespace = {"__builtins__": builtins, "__name__": "__puzzle__", "List": sys.modules["typing"].List}
    exec(code, namespace)
    function = namespace.get(name)
    if not callable(function):
        raise ProgramError("syntax", f"the {name} source defines no function {name}")
    return function


SHOWN_INT_BITS = 1 << 14  # an int past this is shown by its size: its decimal digits take quadratic time to find


class _Repr(reprlib.Repr):
    def repr_int(self, value, level):
        if value.bit_length() > SHOWN_INT_BITS:
            return f"<int of {value.bit_length()} bits>"
        return super().repr_int(value, level)


_REPR = _Repr()


def safe_repr(value) -> str:
    """A short repr, in bounded time: an answer of 10**600_000 (which P3 judges in a fraction of a second, and passes
    between processes as hex) is not converted to decimal for it."""
    try:
        return _REPR.repr(value)
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


def loaded(source: str, code: bytes, name: str):
    """The code of `source`: `code` marshalled by the warden (which compiles short sources, `main.WARDEN_COMPILES`),
    else compiled here, in the program's own process, under its limits and clock."""
    return marshal.loads(code) if code else compile_source(source, name)


def run_g(g: str, code: bytes, answer_type: str) -> list[str]:
    """Runs in a runner: ["answer", JSON text, repr of the answer, its shared places] (`encode_shared`), or [status,
    detail, repr of the answer or "", ""] when g gave no answer to judge. `answer_type` ("" for any JSON) decides
    how the answer travels. g's process never sees f."""
    try:
        answer = instantiate(loaded(g, code, "g"), "g")()
        if answer_type and not type_matches(answer, parse_answer_type(answer_type)):
            return ["fail", f"answer {safe_repr(answer)} is not of type {answer_type}", safe_repr(answer), ""]
        text, shared = encode_shared(answer, answer_type)
        return ["answer", text, safe_repr(answer), shared]
    except ProgramError as error:
        return [error.status, error.detail, "", ""]
    except MemoryError as error:
        return ["memory", describe(error, "g", g), "", ""]
    except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, anything g raises
        return ["error", describe(error, "g", g), "", ""]


def judge_answer(f: str, code: bytes, answer_type: str, text: str, shared: str) -> list[str]:
    """Runs in a judge: [status, detail, repr of the answer, repr of what f returned] for f on the answer that
    `text` and `shared` encode (`decode_shared`), of `answer_type` ("" for any JSON; checked again here: the answer
    came from g's process)."""
    try:
        code = loaded(f, code, "f")
    except ProgramError as error:
        return [error.status, error.detail, "", ""]
    except MemoryError as error:
        return ["memory", describe(error, "f", f), "", ""]
    try:
        answer = decode_shared(text, shared, answer_type)
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
        return ["memory", describe(error, "f", f), shown, ""]
    except BaseException as error:  # noqa: BLE001
        return ["error", describe(error, "f", f), shown, ""]


def read_answer_type(f: str) -> list[str]:
    """Runs in a reader, for an f too long for the warden to parse (`main.WARDEN_COMPILES`): ["type", its answer type
    or "" for any JSON], or [status, why]."""
    try:
        return ["type", answer_type_of(f, None)]
    except ValueError as error:
        return ["error", str(error)]
    except MemoryError as error:
        return ["memory", describe(error, "f", f)]


def call_function(source: str, code: bytes, name: str, text: str) -> list[str]:
    """Runs in a caller: the program's module, then `name(input)` on the input `text` encodes:
    ["returned", "", the JSON text of the result], or [status, detail, ""] when the program or the
    call raised or returned something that is not JSON data."""
    try:
        code = loaded(source, code, "program")
        namespace = {"__builtins__": builtins, "__name__": "__program__"}
        exec(code, namespace)
        function = namespace.get(name)
        if not callable(function):
            return ["error", f"the program defines no function {name}", ""]
        return ["returned", "", encode_answer(function(decode_answer(text)))]
    except ProgramError as error:
        return [error.status, error.detail, ""]
    except MemoryError as error:
        return ["memory", describe(error, "program", source), ""]
    except BaseException as error:  # noqa: BLE001
        return ["error", describe(error, "program", source), ""]
