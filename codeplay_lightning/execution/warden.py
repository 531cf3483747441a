"""The sandbox's warden: starts the processes that run programs and never runs a program itself.

Started by `Sandbox` as `python -s -S warden.py SETTINGS_JSON` with two inherited pipe fds;
standard library only (the package is not importable in here on purpose).

  launcher ──fork──> warden: PID 1 of new pid, net, mount and ipc namespaces (root only), chrooted
     │               into a read-only root holding the system's libraries and programs and the stdlib
     │                └── zygote: forked once, before the first request, and never sent a program,
     │                    an answer or a request; on the warden's word it forks one of
     │                     ├── runner: runs g, sends its answer as JSON text, then is killed
     │                     ├── judge: runs f on that one answer, sends the verdict, then is killed
     │                     └── caller: runs a program and one call of its function (`apply`)
     └─ reports the warden's pid and exit status, then removes its cgroup (and workspace)

Every process that runs program code is forked from the zygote and used for one program, so
nothing in its memory, frames or fds comes from another program: it receives its own program
(compiled by the warden; compiling runs nothing) and its one input on a fresh pipe, replies on
another, and the zygote kills it and everything it started before the next one is forked. Each
gets a fresh /tmp (a new tmpfs as root, a new directory without), a seccomp filter that denies the
kernel state shared by a uid or a host (keyrings, SysV and POSIX IPC, ptrace, namespaces), and as
root a uid of its own (runners 65534, judges and callers 65533) in a cgroup that bounds the memory
and processes of one program. What a program's processes cost (an OOM kill, the files it left) is
settled before the next process is forked. Without root the warden degrades to rlimits and a
filter that lets a program signal only itself, and says so.

Every message between the processes is a frame: a 4-byte size, then a list of strings (`pack`).
"""

import builtins
import ctypes
import fcntl
import gc
import json
import marshal
import os
import random
import reprlib
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
from typing import NamedTuple

HEADER = struct.Struct(">I")  # a frame: body size, then the body
COUNT = struct.Struct(">H")  # a body: field count, each field's size, then the UTF-8 fields
SIZE = struct.Struct(">I")

NOBODY = 65534  # runners' uid
JUDGE_UID = 65533  # judges' and callers' uid: no runner can signal the judge of its own program
ANSWER_CHARS = 1 << 23  # an answer (or a call's value) travels as ASCII JSON text of at most this many characters
ANSWER_DEPTH = 100  # and nests at most this deep
DETAIL_CHARS = 8192  # of a verdict's detail, and of the reprs of an answer and of what f returned
PROGRAM_PROCESSES = 32  # processes one program may have at once (itself included)
KILL_SECONDS = 2.0  # time to stop everything a program left behind before the warden gives up
TMP_SIZE = "64m"  # each program process's fresh /tmp
TRASH_SLICE = 0.05  # seconds of deleting what programs left, between requests, without root
RUNNER_STATUSES = ("answer", "fail", "syntax", "error", "memory")  # a runner's reply: g's answer, or why none
JUDGE_STATUSES = ("pass", "fail", "syntax", "error", "memory")  # a judge's reply
CALLER_STATUSES = ("returned", "syntax", "error", "memory")  # a caller's reply
ROLE_STATUSES = {b"runner": RUNNER_STATUSES, b"judge": JUDGE_STATUSES, b"caller": CALLER_STATUSES}
VERDICT_STATUSES = (*JUDGE_STATUSES, "timeout")  # a program's verdict: its judge's, or the warden's timeout
CALL_STATUSES = (*CALLER_STATUSES, "timeout")  # a call's verdict: its caller's, or the warden's timeout
PRELOADED = (  # imported by the zygote's parent, so that every program process starts with them; few,
    # because each forks with them (P3 programs use little beyond these, and import the rest themselves)
    "math",
    "itertools",
    "functools",
    "collections",
    "heapq",
    "bisect",
    "operator",
    "re",
    "string",
    "random",
    "typing",
    "copy",
    "json",
    "time",
    "traceback",
    "reprlib",
)
P3_BASE_TYPES = {"bool": bool, "int": int, "float": float, "str": str}
JSON_TYPES = {type(None), bool, int, float, str, list, dict}

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 36, 38
WALL = 0x40000000  # waitpid's __WALL: also children whose exit signal is not SIGCHLD (raw clone(2))


# ---------------------------------------------------------------- frames


def pack(*fields: str | bytes) -> bytes:
    """One frame holding `fields`. Text that is not valid UTF-8 (lone surrogates) is escaped."""
    encoded = [field if type(field) is bytes else field.encode("utf-8", "backslashreplace") for field in fields]
    body = COUNT.pack(len(encoded)) + b"".join(SIZE.pack(len(part)) for part in encoded) + b"".join(encoded)
    return HEADER.pack(len(body)) + body


def unpack(body: bytes, decode: bool = True) -> list:
    """The fields of a frame's body (bytes unless `decode`); ValueError for a body that is not
    exactly such a list."""
    if len(body) < COUNT.size:
        raise ValueError("a frame shorter than its field count")
    (count,) = COUNT.unpack_from(body)
    offset = COUNT.size + count * SIZE.size
    if offset > len(body):
        raise ValueError("a frame shorter than its field sizes")
    sizes = [SIZE.unpack_from(body, COUNT.size + index * SIZE.size)[0] for index in range(count)]
    if offset + sum(sizes) != len(body):
        raise ValueError("a frame whose fields do not add up to its size")
    fields = []
    for size in sizes:
        field = body[offset : offset + size]
        fields.append(field.decode("utf-8", "replace") if decode else field)
        offset += size
    return fields


class FrameReader:
    """Cuts the bytes read from a pipe into frames; a frame over `limit` bytes is a ValueError
    as soon as its header arrives, before anything of it is buffered."""

    def __init__(self, limit: int, decode: bool = True):
        self.limit, self.decode, self.buffer = limit, decode, bytearray()

    def feed(self, chunk: bytes) -> list[list]:
        self.buffer += chunk
        frames = []
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > self.limit:
                raise ValueError(f"a frame of {size} bytes (at most {self.limit})")
            if len(self.buffer) < HEADER.size + size:
                break
            frames.append(unpack(bytes(self.buffer[HEADER.size : HEADER.size + size]), self.decode))
            del self.buffer[: HEADER.size + size]
        return frames


def read_frame(fd: int, limit: int, decode: bool = True) -> list | None:
    """The next frame from a blocking fd that only trusted code writes to; None at end of file."""
    reader = FrameReader(limit, decode)
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        frames = reader.feed(chunk)
        if frames:
            return frames[0]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def frame_limit(output_chars: int) -> int:
    """The largest frame a warden or its children may send: an answer or a call's value (ASCII JSON of at
    most ANSWER_CHARS characters), plus a verdict's detail, answer and returned reprs (DETAIL_CHARS each) and
    output (g's and f's together: output_chars + 200) at 6 bytes a character at worst (a lone surrogate
    travels as a backslash escape), plus 4096 bytes for the rest."""
    return ANSWER_CHARS + 6 * (output_chars + 200 + 3 * DETAIL_CHARS) + 4096


# The frames between the supervisor and a warden: the kind, then these fields (all text). Both sides
# build and read them with these classes. A warden also sends "pid" (its pid, as the supervisor sees it)
# and "fatal" (the traceback of a start-up failure).


class RunRequest(NamedTuple):
    """A "run" request: judge f(g()) for one program."""

    sequence: str  # the request's number, which its reply repeats
    f: str
    g: str
    ans_type: str
    typed: str  # "1": ans_type is the answer's type; "0": f's first annotation is


class ApplyRequest(NamedTuple):
    """An "apply" request: run a program, then call one of its functions."""

    sequence: str
    source: str
    function: str
    input: str  # JSON text


class ReadyReply(NamedTuple):
    """The "ready" reply: the warden has started and awaits requests."""

    level: str  # "full", "partial" or "basic"
    isolation: str  # how it isolates programs, in words


class VerdictReply(NamedTuple):
    """The "verdict" reply to a "run"."""

    sequence: str
    status: str  # one of VERDICT_STATUSES
    seconds: str  # repr of a float
    detail: str
    output: str
    answer: str  # repr of g's answer
    returned: str  # repr of what f returned for it


class ReturnedReply(NamedTuple):
    """The "returned" reply to an "apply"."""

    sequence: str
    status: str  # one of CALL_STATUSES
    seconds: str  # repr of a float
    detail: str
    output: str
    value: str  # JSON text of what the function returned; "" unless the status is "returned"


class SupervisorGone(Exception):
    """The supervisor closed the request pipe: the warden exits, and its namespace with it."""


class Deadline(Exception):
    pass


def wait_for(fd: int, events: int, deadline: float, supervisor_fd: int) -> None:
    """Until `fd` is ready for `events`: Deadline past `deadline`, SupervisorGone as soon as the
    supervisor's request pipe hangs up (the warden then stops at once)."""
    poller = select.poll()
    poller.register(fd, events)
    poller.register(supervisor_fd, 0)  # only hang-ups are reported for events=0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Deadline
        ready = poller.poll(remaining * 1000)
        if any(ready_fd == supervisor_fd for ready_fd, _ in ready):
            raise SupervisorGone
        if ready:
            return


class Channel:
    """Non-blocking reads and writes to one child, each bounded by a deadline. While waiting, the
    supervisor's request pipe is watched too: if the supervisor dies, the warden stops at once."""

    def __init__(self, read_fd: int | None, write_fd: int | None, limit: int, supervisor_fd: int):
        self.read_fd, self.write_fd, self.supervisor_fd = read_fd, write_fd, supervisor_fd
        self.reader = FrameReader(limit)
        for fd in (read_fd, write_fd):
            if fd is not None:
                os.set_blocking(fd, False)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            if fd is not None:
                os.close(fd)

    def send(self, data: bytes, deadline: float) -> bool:
        """False when the child closed its end; Deadline when it stopped reading."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.write_fd, view) :]
            except BlockingIOError:
                wait_for(self.write_fd, select.POLLOUT, deadline, self.supervisor_fd)
            except BrokenPipeError:
                return False
        return True

    def receive(self, deadline: float) -> list[str] | None:
        """The next frame; None at end of file; ValueError for a malformed or oversized frame."""
        while True:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                wait_for(self.read_fd, select.POLLIN, deadline, self.supervisor_fd)
                continue
            if not chunk:
                return None
            frames = self.reader.feed(chunk)
            if frames:
                return frames[0]


# ---------------------------------------------------------------- answers


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
        if depth > ANSWER_DEPTH or containers > ANSWER_CHARS:  # also how a list that holds itself ends
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
    if len(text) > ANSWER_CHARS:
        raise ValueError(f"the answer is {len(text)} characters as JSON (at most {ANSWER_CHARS})")
    return text


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
    level that should be a list is not."""
    if depth == 0:
        return function(value)
    if type(value) is not list:
        raise ValueError("a list level of the answer's type is not a list")
    return [_map_leaves(item, depth - 1, function) for item in value]


# ---------------------------------------------------------------- running program code


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


# ---------------------------------------------------------------- isolation


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def _bind_read_only(source: str, target: str) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _mount_tmp(target: str) -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMP_SIZE},mode=1777")


def build_root(stdlib: str, module_dirs: list[str]) -> str:
    """A read-only root that holds only the system's libraries and programs and Python's stdlib,
    each at its own path, with every site-packages and dist-packages directory in it emptied
    (`module_dirs`, the packages offered to programs, are mounted back at their own paths): no
    home directories, no /run or /var (no unix sockets to reach), an empty /etc, a /dev with null,
    zero, random and urandom, /proc of this pid namespace and a small /tmp."""
    system = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", stdlib]
    links = {path: os.readlink(path) for path in system if os.path.islink(path)}
    # held open before the host's /tmp is hidden: the interpreter or a package may live under it
    held = {
        path: os.open(path, os.O_PATH | os.O_DIRECTORY)
        for path in [*system, *module_dirs]
        if path not in links and os.path.isdir(path)
    }
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")  # host /tmp hidden too
    root = "/tmp/root"
    os.mkdir(root)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in system:
        inside = root + path
        if path in links:
            os.symlink(links[path], inside)
        elif path in held and not os.path.exists(inside):
            os.makedirs(inside, 0o755)
            _bind_read_only(f"/proc/self/fd/{held[path]}", inside)
    masks = [path for path in _package_dirs(root) if os.path.isdir(path)]
    for mask in masks:
        _mount("tmpfs", mask, "tmpfs", MS_NOSUID | MS_NODEV, "size=16k,mode=755")
    for path in module_dirs:
        os.makedirs(root + path, 0o755, exist_ok=True)
        _bind_read_only(f"/proc/self/fd/{held[path]}", root + path)
    for fd in held.values():
        os.close(fd)
    for mask in masks:
        _mount(None, mask, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for path in ("/tmp", "/etc", "/proc", "/dev"):
        os.makedirs(root + path, 0o755, exist_ok=True)
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16k,mode=755")
    for device in ("null", "zero", "urandom", "random"):
        open(f"{root}/dev/{device}", "w").close()
        _bind_read_only(f"/dev/{device}", f"{root}/dev/{device}")
        _mount(None, f"{root}/dev/{device}", None, MS_REMOUNT | MS_BIND | MS_NOSUID)  # writable, devices allowed
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount_tmp(root + "/tmp")
    _mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return root


def _package_dirs(root: str) -> list[str]:
    """Where installed packages live inside `root`: the interpreter's own site-packages and the
    system's python site- and dist-packages directories."""
    import glob
    import sysconfig

    own = {
        sysconfig.get_path(key, vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
        for key in ("purelib", "platlib")
    }
    patterns = ["/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages", "/usr/lib/python3/dist-packages"]
    return sorted({root + path for path in own} | {path for pattern in patterns for path in glob.glob(root + pattern)})


class Cgroup:
    """The cgroup(s) of one warden's zygote and so of every process it forks: memory and process
    count bounded per program (one program's processes run under a warden at a time). cgroup v2
    when the warden's parent cgroup delegates both controllers, else cgroup v1's memory and pids
    hierarchies. Named at random: no two sandboxes share one, whatever their pid namespaces."""

    def __init__(self, version: int, directories: list[str]):
        self.version, self.directories = version, directories

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> "Cgroup | None":
        """None where neither is available (not root, or no writable hierarchy)."""
        name = f"codeplay-{os.urandom(8).hex()}"
        paths = {}
        with open("/proc/self/cgroup") as lines:
            for line in lines:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
        v2 = f"/sys/fs/cgroup{paths.get('', '/')}".rstrip("/")
        try:
            with open(f"{v2}/cgroup.subtree_control") as control:
                delegated = {"memory", "pids"} <= set(control.read().split())
        except OSError:
            delegated = False
        if delegated:
            version, directories = 2, [f"{v2}/{name}"]
            limits = {"memory.max": memory_bytes, "pids.max": processes}
        else:
            version = 1
            directories = [
                f"/sys/fs/cgroup/{controller}{paths.get(controller, '/')}".rstrip("/") + f"/{name}"
                for controller in ("memory", "pids")
            ]
            limits = {"memory.limit_in_bytes": memory_bytes, "pids.max": processes}
        made = []
        try:
            for directory in directories:
                os.mkdir(directory)
                made.append(directory)
            for file, value in limits.items():
                directory = next(d for d in directories if os.path.exists(f"{d}/{file}"))
                with open(f"{directory}/{file}", "w") as limit:
                    limit.write(str(value))
            return cls(version, directories)
        except (OSError, StopIteration):
            for directory in made:
                os.rmdir(directory)
            return None

    def open_files(self) -> tuple[list[int], int]:
        """(fds to join each hierarchy, fd of the OOM-kill counter): opened before the chroot."""
        joins = [os.open(f"{directory}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for directory in self.directories]
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        return joins, os.open(f"{self.directories[0]}/{events}", os.O_RDONLY | os.O_CLOEXEC)

    def remove(self) -> None:
        """Once the warden is gone: its processes leave the cgroup as the kernel reaps them."""
        deadline = time.monotonic() + 5.0
        for directory in self.directories:
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)


def oom_kills(fd: int) -> int:
    for line in os.pread(fd, 4096, 0).decode().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def _tasks_of(uid: int) -> int:
    """Threads that count against uid's RLIMIT_NPROC now, from the host's /proc."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


class Removal:
    """Deleting a tree a slice at a time (`step` goes on where the last one stopped), holding one
    directory open and walking by names relative to it: a program may leave a tree deeper than any
    stack or path. Directories are made writable first: without root, programs have the warden's
    uid and may have locked them."""

    DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW

    def __init__(self, top: str):
        self.top, self.fd, self.names = top, None, []  # the open directory, and its names below top

    def step(self, deadline: float) -> bool:
        """Delete until `deadline`; True once everything is gone (or could not be)."""
        try:
            if self.fd is None:
                os.chmod(self.top, 0o700)
                self.fd = os.open(self.top, self.DIRECTORY)
            while time.monotonic() < deadline:
                child = None
                with os.scandir(self.fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            child = entry.name
                        else:
                            os.unlink(entry.name, dir_fd=self.fd)
                if child is not None:  # down into one directory that is left
                    os.chmod(child, 0o700, dir_fd=self.fd)
                    self._move_to(os.open(child, self.DIRECTORY, dir_fd=self.fd))
                    self.names.append(child)
                elif self.names:  # empty: up, and remove it
                    self._move_to(os.open("..", self.DIRECTORY, dir_fd=self.fd))
                    os.rmdir(self.names.pop(), dir_fd=self.fd)
                else:
                    self._move_to(None)
                    os.rmdir(self.top)
                    return True
            return False
        except OSError:  # gone already, or not ours to delete: the launcher tries once more at the end
            self._move_to(None)
            return True

    def _move_to(self, fd: int | None) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = fd


# ---------------------------------------------------------------- seccomp

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {  # name: (x86_64, aarch64)
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),  # keyrings: per uid, host-wide
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "shmdt": (67, 197),  # SysV IPC
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    "mq_open": (240, 180),
    "mq_unlink": (241, 181),
    "mq_timedsend": (242, 182),  # POSIX message queues
    "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184),
    "mq_getsetattr": (245, 185),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),  # other processes
    "kcmp": (312, 272),
    "perf_event_open": (298, 241),
    "pidfd_open": (434, 434),
    "pidfd_getfd": (438, 438),
    "pidfd_send_signal": (424, 424),
    "process_madvise": (440, 440),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),  # namespaces, mounts
    "pivot_root": (155, 41),
    "bpf": (321, 280),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
}
SIGNALLING = {
    "kill": (62, 129),
    "tkill": (200, 130),
    "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
}
CLONE, CLONE3 = {"x86_64": 56, "aarch64": 220}, 435
NAMESPACE_FLAGS = 0x7E020080  # clone's CLONE_NEW* flags: NS, CGROUP, UTS, IPC, USER, PID, NET, TIME
EPERM, ENOSYS = 1, 38
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
LOAD, JUMP_EQUAL, JUMP_AT_LEAST, JUMP_ANY_BIT, RETURN = 0x20, 0x15, 0x35, 0x45, 0x06  # classic BPF opcodes


def _bpf(code: int, true: int, false: int, value: int) -> bytes:
    return struct.pack("=HBBI", code, true, false, value)


def seccomp_filter(only_signal: int | None = None) -> bytes | None:
    """A seccomp program (None on an architecture it does not know). By default it denies the
    syscalls of `SYSCALLS` (EPERM), clone with a namespace flag (EPERM) and clone3 (ENOSYS, so
    that the C library falls back to clone); with `only_signal=pid`, it denies signals to any
    process but `pid` and its process group instead. Any other ABI (x86's int 0x80, x32) kills."""
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        return None
    column = 0 if machine == "x86_64" else 1
    program = [
        _bpf(LOAD, 0, 0, 4),
        _bpf(JUMP_EQUAL, 1, 0, AUDIT_ARCH[machine]),
        _bpf(RETURN, 0, 0, RET_KILL_PROCESS),
        _bpf(LOAD, 0, 0, 0),
        _bpf(JUMP_AT_LEAST, 0, 1, 0x40000000),
        _bpf(RETURN, 0, 0, RET_KILL_PROCESS),
    ]
    if only_signal is None:
        for numbers in SYSCALLS.values():
            program += [_bpf(JUMP_EQUAL, 0, 1, numbers[column]), _bpf(RETURN, 0, 0, RET_ERRNO | EPERM)]
        program += [
            _bpf(JUMP_EQUAL, 0, 1, CLONE3),
            _bpf(RETURN, 0, 0, RET_ERRNO | ENOSYS),
            _bpf(JUMP_EQUAL, 0, 3, CLONE[machine]),
            _bpf(LOAD, 0, 0, 16),  # clone's flags
            _bpf(JUMP_ANY_BIT, 0, 1, NAMESPACE_FLAGS),
            _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
        ]
    else:
        for numbers in SIGNALLING.values():  # the target (pid, or -group) is the first argument
            program += [
                _bpf(JUMP_EQUAL, 0, 6, numbers[column]),
                _bpf(LOAD, 0, 0, 16),
                _bpf(JUMP_EQUAL, 2, 0, 0),
                _bpf(JUMP_EQUAL, 1, 0, only_signal),
                _bpf(JUMP_EQUAL, 0, 1, -only_signal & 0xFFFFFFFF),
                _bpf(RETURN, 0, 0, RET_ALLOW),
                _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
            ]
    return b"".join(program + [_bpf(RETURN, 0, 0, RET_ALLOW)])


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install_seccomp(program: bytes) -> None:
    """Install a seccomp program on this process and every process it forks from now on."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_char_p))
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0), "seccomp")


# ---------------------------------------------------------------- the zygote


class Zygote:
    """The process every program process is forked from. It is forked from the warden before the
    first request and only ever receives one-word commands: `runner`, `judge` or `caller` (fork
    one; the warden gets its pid and its two pipe ends) and `end` (kill and reap everything it
    forked, and say how the main one ended). It never sees a program, an answer or a request,
    so nothing of one program is in the memory another is forked with."""

    ROLES = {b"runner": NOBODY, b"judge": JUDGE_UID, b"caller": JUDGE_UID}

    def __init__(self, warden: "Warden"):
        self.namespaced, self.workspace = warden.namespaced, warden.workspace
        self.address_space, self.nproc = warden.address_space, warden.nproc
        self.recursion_limit, self.output_chars = warden.recursion_limit, warden.output_chars
        self.cgroup_fds = warden.cgroup_fds
        self.output: CappedOutput | None = None

    def serve(self, commands: socket.socket) -> None:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of program processes come here to be killed
        for fd in self.cgroup_fds:  # every process it forks starts in the program's cgroup
            os.write(fd, b"0")
        filter_program = seccomp_filter()
        if filter_program is not None:
            install_seccomp(filter_program)
        # what every program process starts with, set once here rather than in each
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        sys.setrecursionlimit(self.recursion_limit)
        sys.set_int_max_str_digits(0)  # P3 predates the limit; huge conversions meet the timeout instead
        gc.collect()
        _libc.malloc_trim(0)  # fewer pages to copy at every fork
        gc.freeze()  # program processes' collections leave these objects (and their pages) alone
        main = None
        while command := commands.recv(16):
            if command == b"end":
                commands.send(self._end(main))
                main = None
            else:
                main = self._fork(command, commands)
        self._end(main)

    def _fork(self, role: bytes, commands: socket.socket) -> int:
        program_read, program_write = os.pipe()
        reply_read, reply_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self._isolate([program_read, reply_write], self.ROLES[role])
                {b"runner": self._runner_main, b"judge": self._judge_main, b"caller": self._caller_main}[role]()
            except BaseException:  # noqa: BLE001 - a child that could not even reply: the warden says so
                os._exit(70)
            os._exit(0)
        os.close(program_read)
        os.close(reply_write)
        socket.send_fds(commands, [str(pid).encode()], [program_write, reply_read])
        os.close(program_write)
        os.close(reply_read)
        return pid

    def _end(self, main: int | None) -> bytes:
        """Kill every child until none is left: the main one, and the orphans of its descendants
        (this is their subreaper). b"<main's wait status> <1 if all are gone, else 0>"."""
        status, deadline = -1, time.monotonic() + KILL_SECONDS
        if main is not None:  # the usual case: the main one alone, reaped without a look at /proc
            try:
                os.kill(main, signal.SIGKILL)
                status = os.waitpid(main, WALL)[1]
                os.waitpid(-1, os.WNOHANG | WALL)  # raises when no child at all is left
            except ChildProcessError:
                return f"{status} 1".encode()
        while children := _children():
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in children:
                try:
                    _, wait_status = os.waitpid(pid, WALL)
                except ChildProcessError:
                    continue
                if pid == main:
                    status = wait_status
            if time.monotonic() > deadline:
                return f"{status} 0".encode()
        return f"{status} 1".encode()

    def _isolate(self, keep: list[int], uid: int) -> None:
        """In a forked child: its own process group, `keep` as fds 3, 4, ..., limits, the uid, a
        fresh working directory and captured output (the rest it inherits from the zygote)."""
        os.setpgid(0, 0)  # a signal to "my process group" reaches only this program
        if self.cgroup_fds:  # the cgroup's OOM killer picks a program process before the zygote
            score = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(score, b"1000")
            os.close(score)
        os.chdir(self.workspace)
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1000) for fd in keep]
        for number, fd in enumerate(moved, start=3):
            os.dup2(fd, number)
        os.closerange(3 + len(keep), 1 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (self.address_space,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20,) * 2)
        if self.nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc,) * 2)
        if self.namespaced:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        else:  # the warden's uid: it must not be able to signal the supervisor, the warden or the zygote
            install_seccomp(seccomp_filter(only_signal=os.getpid()))
        random.seed(0)  # after the fork: `random` reseeds itself from the system in every forked child
        self.output = sys.stdout = sys.stderr = CappedOutput(self.output_chars)

    def _runner_main(self) -> None:
        source, code, answer_type = read_frame(3, 1 << 31, decode=False)
        reply = run_g(marshal.loads(code), source.decode(), answer_type.decode())
        write_all(4, pack(*reply, self.output.value()))

    def _judge_main(self) -> None:
        source, code, answer_type, answer = read_frame(3, 1 << 31, decode=False)
        reply = judge_answer(marshal.loads(code), source.decode(), answer_type.decode(), answer.decode())
        write_all(4, pack(*reply, self.output.value()))

    def _caller_main(self) -> None:
        source, code, function, text = read_frame(3, 1 << 31, decode=False)
        reply = call_function(marshal.loads(code), source.decode(), function.decode(), text.decode())
        write_all(4, pack(*reply, self.output.value()))


def _children() -> list[int]:
    """This single-threaded process's children, zombies included."""
    with open(f"/proc/self/task/{os.getpid()}/children") as children:
        return [int(pid) for pid in children.read().split()]


# ---------------------------------------------------------------- the warden


class Warden:
    def __init__(self, settings: dict, namespaced: bool, cgroup: Cgroup | None, workspace: str | None):
        self.request_fd, self.reply_fd = settings["request_fd"], settings["reply_fd"]
        self.timeout, self.output_chars = settings["timeout"], settings["output_chars"]
        self.memory_bytes, self.recursion_limit = settings["memory_mb"] << 20, settings["recursion_limit"]
        self.namespaced, self.cgroup = namespaced, cgroup
        self.program_uid = NOBODY if namespaced else os.getuid()
        self.nproc = None if cgroup else _tasks_of(self.program_uid) + PROGRAM_PROCESSES
        self.cgroup_fds, self.oom_fd = cgroup.open_files() if cgroup else ([], None)
        self.oom_count = oom_kills(self.oom_fd) if self.oom_fd is not None else 0
        # where program processes work: /tmp (a fresh tmpfs each), or without namespaces a
        # directory of the host's, replaced when a program left something in it
        self.workspace = "/tmp" if namespaced else os.path.join(workspace, "work")
        self.trash: list[Removal] = []  # without namespaces: directories programs left, deleted between requests
        self.trashed = 0
        self.compiled: tuple | None = None  # (key, what compiling it gave): f repeats across attempts
        self.seccomp = seccomp_filter() is not None
        self.address_space = 0
        self.zygote_pid, self.zygote = 0, None

    def start(self, settings: dict) -> None:
        """Import what programs start with, build the root, and fork the zygote: before any request."""
        stdlib = os.path.dirname(os.__file__)
        sys.path[:] = [path for path in sys.path if path.startswith(stdlib)] + settings["module_roots"]
        for name in PRELOADED + tuple(settings["modules"]):
            __import__(name)
        if self.namespaced:  # the extra modules' directories only, at their own paths: nothing else of site-packages
            os.chroot(build_root(stdlib, settings["module_dirs"]))
            os.chdir("/")
        else:
            os.setsid()
            os.mkdir(self.workspace, 0o700)
        _libc.prctl(PR_SET_DUMPABLE, 0)  # programs of the same uid cannot ptrace the warden
        with open("/proc/self/statm") as statm:
            self.address_space = int(statm.read().split()[0]) * resource.getpagesize() + self.memory_bytes
        gc.freeze()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.zygote_pid = os.fork()
        if self.zygote_pid == 0:
            try:
                ours.close()
                os.close(self.request_fd)
                os.close(self.reply_fd)
                Zygote(self).serve(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self.zygote = ours

    def isolation(self) -> ReadyReply:
        """How it isolates programs: level "full" with namespaces, a cgroup and the seccomp filter."""
        memory = self.memory_bytes >> 20
        if self.cgroup:
            limits = (
                f"cgroup v{self.cgroup.version}: {memory} MiB and {PROGRAM_PROCESSES} processes per program, "
                f"and {memory} MiB per process"
            )
        else:
            limits = (
                f"rlimits only: {memory} MiB per process, processes of uid {self.program_uid} capped at {self.nproc}"
            )
        filtered = (
            "seccomp: no keyrings, SysV or POSIX IPC, ptrace or namespaces"
            if self.seccomp
            else "no seccomp filter on this architecture"
        )
        if self.namespaced:
            level = "full" if self.cgroup and self.seccomp else "partial"
            return ReadyReply(
                level,
                f"namespaces: pid+net+mount+ipc, read-only chroot, uid {NOBODY} (f: {JUDGE_UID}), "
                "every program process forked from a clean zygote with a fresh /tmp; "
                f"{filtered}; {limits}",
            )
        return ReadyReply(
            "basic",
            "basic (not root): own session, no namespaces (network and files visible), "
            f"programs can signal only themselves; {filtered}; {limits}",
        )

    # ------------------------------------------------------------ the request loop

    def serve(self) -> None:
        write_all(self.reply_fd, pack("ready", *self.isolation()))
        while True:
            self._take_out_trash()
            request = read_frame(self.request_fd, 1 << 31)
            if request is None:
                return
            try:
                if request[0] == "run":
                    run = RunRequest(*request[1:])
                    ans_type = run.ans_type if run.typed == "1" else None
                    status, detail, seconds, output, answer, returned = self.run(run.f, run.g, ans_type)
                    reply = pack(
                        "verdict", *VerdictReply(run.sequence, status, repr(seconds), detail, output, answer, returned)
                    )
                else:
                    call = ApplyRequest(*request[1:])
                    status, detail, seconds, output, value = self.apply(call.source, call.function, call.input)
                    reply = pack(
                        "returned", *ReturnedReply(call.sequence, status, repr(seconds), detail, output, value)
                    )
            except SupervisorGone:
                return
            write_all(self.reply_fd, reply)

    def run(self, f: str, g: str, ans_type: str | None) -> tuple[str, str, float, str, str, str]:
        """(status, detail, seconds, output, repr of g's answer, repr of what f returned) for one program."""
        started = time.monotonic()
        deadline = started + self.timeout
        try:
            f_code, answer_type = self._compile(("f", f, ans_type), lambda: _marshalled(*compile_puzzle(f, ans_type)))
            g_code = marshal.dumps(compile_source(g, "g"))
        except ProgramError as error:
            return error.status, error.detail, time.monotonic() - started, "", "", ""
        status, detail, answer, output = self._ask(b"runner", (g, g_code, answer_type), deadline, 4, "g")
        returned = ""
        if status == "answer":
            status, detail, answer, returned, judge_output = self._ask(
                b"judge", (f, f_code, answer_type, detail), deadline, 5, "f"
            )
            output += judge_output
        seconds = time.monotonic() - started
        if seconds > self.timeout and status != "timeout":
            status, detail = "timeout", f"g and f took {seconds:.2f} s, over the {self.timeout:g} s limit"
        return (
            status,
            detail[:DETAIL_CHARS],
            seconds,
            self._capped(output),
            answer[:DETAIL_CHARS],
            returned[:DETAIL_CHARS],
        )

    def apply(self, source: str, function: str, text: str) -> tuple[str, str, float, str, str]:
        """(status, detail, seconds, output, the JSON text `function` returned for the input `text`),
        in a process of its own that runs the program first."""
        started = time.monotonic()
        try:
            (code,) = self._compile(("program", source), lambda: (marshal.dumps(compile_source(source, "program")),))
        except ProgramError as error:
            return error.status, error.detail, time.monotonic() - started, "", ""
        status, detail, value, output = self._ask(
            b"caller", (source, code, function, text), started + self.timeout, 4, "the program"
        )
        seconds = time.monotonic() - started
        if seconds > self.timeout and status != "timeout":
            status, detail, value = "timeout", f"the call took {seconds:.2f} s, over the {self.timeout:g} s limit", ""
        if len(value) > ANSWER_CHARS:  # only a reply the program forged itself can be longer
            status, detail, value = "error", f"the returned value is over {ANSWER_CHARS} characters", ""
        return status, detail[:DETAIL_CHARS], seconds, self._capped(output), value

    def _capped(self, output: str) -> str:
        """A reply's output within what the frame limit allows: each process caps its own, but a program can
        forge its process's reply (and g's and f's outputs add up)."""
        if len(output) > self.output_chars + 200:
            output = output[: self.output_chars] + "\n[... more characters dropped]"
        return output

    def _compile(self, key: tuple, compile_it) -> tuple:
        """What `compile_it()` gives (or the ProgramError it raised), compiled once while `key` repeats."""
        if self.compiled is None or self.compiled[0] != key:
            try:
                self.compiled = key, compile_it()
            except ProgramError as error:
                self.compiled = key, error
        if isinstance(self.compiled[1], ProgramError):
            raise self.compiled[1]
        return self.compiled[1]

    def _ask(self, role: bytes, request: tuple, deadline: float, fields: int, name: str) -> tuple[str, ...]:
        """The `fields` reply fields of a fresh `role` process to `request`, or (status, detail)
        padded to that length when it gave no such reply. The process and everything it started are
        gone, its OOM kills counted and its files out of reach before this returns."""
        pid, channel = self._fork(role)
        reply = problem = None
        try:
            if channel.send(pack(*request), deadline):
                reply = channel.receive(deadline)
        except Deadline:
            problem = "timeout", f"{name} ran past the {self.timeout:g} s limit"
        except ValueError as error:
            problem = "error", f"{name}'s process sent a malformed frame: {error}"
        finally:
            channel.close()
        how = self._end()
        if self.oom_fd is not None and self.oom_count < (count := oom_kills(self.oom_fd)):
            self.oom_count = count  # one of its processes was killed for the memory the program used
            problem = "memory", f"{name}'s processes ran out of the program's {self.memory_bytes >> 20} MiB"
        elif reply is not None and len(reply) == fields and reply[0] in ROLE_STATUSES[role]:
            return tuple(reply)
        elif problem is None and reply is not None:
            problem = "error", f"{name}'s process broke the protocol (a reply of {len(reply)} fields)"
        elif problem is None:
            expected = "an answer" if role == b"runner" else "a reply"
            problem = "error", f"{name}'s process ended without {expected}: {how}"
        return problem + ("",) * (fields - 2)

    def _fork(self, role: bytes) -> tuple[int, Channel]:
        self.zygote.send(role)
        wait_for(self.zygote.fileno(), select.POLLIN, time.monotonic() + KILL_SECONDS + 60, self.request_fd)
        message, fds, _, _ = socket.recv_fds(self.zygote, 32, 2)
        if len(fds) != 2:
            raise RuntimeError("the zygote is gone")
        return int(message), Channel(fds[1], fds[0], frame_limit(self.output_chars), self.request_fd)

    def _end(self) -> str:
        """Have the zygote kill the program's processes; says how the main one had ended. Then the
        next process gets a fresh working directory if this one left anything in it."""
        self.zygote.send(b"end")
        wait_for(self.zygote.fileno(), select.POLLIN, time.monotonic() + KILL_SECONDS + 60, self.request_fd)
        status, complete = map(int, self.zygote.recv(64).split())
        if not complete:
            raise RuntimeError("could not stop the processes a program left behind")
        self._fresh_workspace()
        if status < 0:
            return "it was never seen to end"
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            return "killed" if number == signal.SIGKILL else f"killed by {signal.Signals(number).name}"
        return f"exit code {os.WEXITSTATUS(status)}"

    def _fresh_workspace(self) -> None:
        """O(1) whatever a program left: a new tmpfs over /tmp (the old one, detached, is freed
        by the kernel), or without namespaces a new directory (the old one goes to the trash)."""
        try:
            if not os.listdir(self.workspace):
                return
        except OSError:  # without root a program can lock the directory: it is replaced too
            pass
        if self.namespaced:
            _check(_libc.umount2(b"/tmp", MNT_DETACH), "umount /tmp")
            _mount_tmp("/tmp")
        else:
            self.trashed += 1
            os.rename(self.workspace, f"{self.workspace}-{self.trashed}")
            self.trash.append(Removal(f"{self.workspace}-{self.trashed}"))
            os.mkdir(self.workspace, 0o700)

    def _take_out_trash(self) -> None:
        """Without namespaces: delete what programs left, a slice at a time, while no request waits."""
        while self.trash and not select.select([self.request_fd], [], [], 0)[0]:
            if self.trash[-1].step(time.monotonic() + TRASH_SLICE):
                self.trash.pop()

    def shutdown(self) -> None:
        """Closing the zygote's socket makes it kill every program process and exit."""
        if self.zygote is not None:
            self.zygote.close()
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and os.waitpid(self.zygote_pid, os.WNOHANG) == (0, 0):
                time.sleep(0.005)


def _marshalled(code, answer_type: str) -> tuple[bytes, str]:
    return marshal.dumps(code), answer_type


def main() -> None:
    settings = json.loads(sys.argv[1])
    request_fd, reply_fd = settings["request_fd"], settings["reply_fd"]
    sys.set_int_max_str_digits(0)  # compiling f and g: P3 has int literals of thousands of digits
    root = os.geteuid() == 0
    namespaced = root and _libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC) == 0
    # + 64 MiB and + 1 process: the zygote, which is in the cgroup too
    cgroup = Cgroup.create((settings["memory_mb"] << 20) + (64 << 20), PROGRAM_PROCESSES + 1) if root else None
    workspace = None if namespaced else __import__("tempfile").mkdtemp(prefix="codeplay-sandbox-")
    pid = os.fork()
    if pid:  # launcher: report the warden's pid, then mirror its exit status
        write_all(reply_fd, pack("pid", str(pid)))
        os.close(request_fd)
        os.close(reply_fd)
        _, status = os.waitpid(pid, 0)
        if cgroup:
            cgroup.remove()
        if workspace:
            Removal(workspace).step(time.monotonic() + 30.0)
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    try:
        warden = Warden(settings, namespaced, cgroup, workspace)
        try:
            warden.start(settings)
            warden.serve()
        finally:
            warden.shutdown()
    except BaseException:  # noqa: BLE001 - report any start-up or loop failure to the supervisor
        try:
            write_all(reply_fd, pack("fatal", traceback.format_exc(limit=5)))
        except OSError:
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
