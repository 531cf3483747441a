"""The sandbox's warden: starts the processes that run programs and never runs a program itself.

Started by `Sandbox` as `python -s -S warden.py SETTINGS_JSON` with two inherited pipe fds;
standard library only (the package is not importable in here on purpose).

  launcher ──fork──> warden: PID 1 of new pid, net, mount and ipc namespaces (root only), chrooted
     │               into a read-only root that holds the system libraries and the stdlib
     │                ├── resident, one per puzzle or program, forked on first use and kept while the
     │                │   requests are of it: a puzzle's judge (f on each answer), or a program's module
     │                │   answering calls of one of its functions on JSON inputs (`apply`)
     │                └── runner, one per program, used once: runs g, sends its answer as JSON text
     └─ reports the warden's pid and exit status, then removes its cgroups

For each program the warden compiles f and g (compiling runs nothing; syntax errors need no
process), forks a runner for g, reads the runner's one frame (bounded in size and time), kills
everything the runner left behind, and passes the answer to the puzzle's judge, which it keeps
while the programs are of the same f. An `apply` request needs no runner: its input comes from the
supervisor, and the program's resident process returns the function's result as JSON. g never shares a process with f, with another program or
with the warden, so it can produce a wrong answer, never a verdict. Runners run as uid 65534 and
judges as 65533, each with an IPC namespace of its own, in a cgroup that bounds the memory and
processes of one program where the machine offers one, else under rlimits. Without root the
warden degrades to rlimits and its own session, and says so.

Every message between the processes is a frame: a 4-byte size, then a list of strings (`pack`).
"""

import builtins
import ctypes
import fcntl
import gc
import json
import os
import random
import reprlib
import resource
import select
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback

HEADER = struct.Struct(">I")  # a frame: body size, then the body
COUNT = struct.Struct(">H")  # a body: field count, each field's size, then the UTF-8 fields
SIZE = struct.Struct(">I")

NOBODY = 65534  # runners' uid
JUDGE_UID = 65533  # judges' uid: another, so that no runner can signal or stop its puzzle's judge
ANSWER_CHARS = 1 << 27  # an answer travels as JSON text of at most this many characters
ANSWER_DEPTH = 100  # and nests at most this deep
PROGRAM_PROCESSES = 32  # processes one program may have at once (itself included)
KILL_SECONDS = 2.0  # time to stop everything a program left behind before the warden gives up
TMP_SIZE = "64m"  # the private /tmp, emptied after every program
DETAIL_CHARS = 8192  # of a verdict's detail
RUNNER_STATUSES = ("answer", "fail", "syntax", "error", "memory")
JUDGE_STATUSES = ("pass", "fail", "syntax", "error", "memory")
CALL_STATUSES = ("returned", "syntax", "error", "memory")
PRELOADED = (  # imported before any program runs, so that runners start with them
    "math", "cmath", "itertools", "functools", "collections", "heapq", "bisect", "operator", "re",
    "string", "random", "statistics", "fractions", "decimal", "typing", "copy", "json", "datetime",
    "time", "hashlib", "array", "ast", "traceback", "reprlib",
)
P3_BASE_TYPES = {"bool": bool, "int": int, "float": float, "str": str}
JSON_TYPES = {type(None), bool, int, float, str, list, dict}

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38
WALL = 0x40000000  # waitpid's __WALL: also children whose exit signal is not SIGCHLD (raw clone(2))


# ---------------------------------------------------------------- frames


def pack(*fields: str) -> bytes:
    """One frame holding `fields`. Text that is not valid UTF-8 (lone surrogates) is escaped."""
    encoded = [field.encode("utf-8", "backslashreplace") for field in fields]
    body = COUNT.pack(len(encoded)) + b"".join(SIZE.pack(len(part)) for part in encoded) + b"".join(encoded)
    return HEADER.pack(len(body)) + body


def unpack(body: bytes) -> list[str]:
    """The fields of a frame's body; ValueError for a body that is not exactly such a list."""
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
        fields.append(body[offset:offset + size].decode("utf-8", "replace"))
        offset += size
    return fields


class FrameReader:
    """Cuts the bytes read from a pipe into frames; a frame over `limit` bytes is a ValueError
    as soon as its header arrives, before anything of it is buffered."""

    def __init__(self, limit: int):
        self.limit, self.buffer = limit, bytearray()

    def feed(self, chunk: bytes) -> list[list[str]]:
        self.buffer += chunk
        frames = []
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > self.limit:
                raise ValueError(f"a frame of {size} bytes (at most {self.limit})")
            if len(self.buffer) < HEADER.size + size:
                break
            frames.append(unpack(bytes(self.buffer[HEADER.size:HEADER.size + size])))
            del self.buffer[:HEADER.size + size]
        return frames


def read_frame(fd: int, limit: int) -> list[str] | None:
    """The next frame from a blocking fd that only trusted code writes to; None at end of file."""
    reader = FrameReader(limit)
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
        view = view[os.write(fd, view):]


class SupervisorGone(Exception):
    """The supervisor closed the request pipe: the warden exits, and its namespace with it."""


class Deadline(Exception):
    pass


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

    def _wait(self, fd: int, events: int, deadline: float) -> None:
        poller = select.poll()
        poller.register(fd, events)
        poller.register(self.supervisor_fd, 0)  # only hang-ups are reported for events=0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Deadline
            ready = poller.poll(remaining * 1000)
            if any(ready_fd == self.supervisor_fd for ready_fd, _ in ready):
                raise SupervisorGone
            if ready:
                return

    def send(self, data: bytes, deadline: float) -> bool:
        """False when the child closed its end; Deadline when it stopped reading."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.write_fd, view):]
            except BlockingIOError:
                self._wait(self.write_fd, select.POLLOUT, deadline)
            except BrokenPipeError:
                return False
        return True

    def receive(self, deadline: float) -> list[str] | None:
        """The next frame; None at end of file; ValueError for a malformed or oversized frame."""
        while True:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                self._wait(self.read_fd, select.POLLIN, deadline)
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
    depth, inner = 0, text.replace(" ", "")
    while inner.startswith(("List[", "list[", "typing.List[")) and inner.endswith("]"):
        inner, depth = inner[inner.index("[") + 1:-1], depth + 1
    if inner not in P3_BASE_TYPES:
        raise ValueError(f"unsupported answer type {text!r}: the judge checks bool, int, float, str "
                         "and List[...] of them (with the element type)")
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
            raise TypeError(f"an answer of type {kind.__name__} cannot be judged: answers are None, "
                            "bool, int, float, str, list and dict (str keys)")
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
    code, answer_type = compile_source(f, "f"), ans_type or first_annotation(f) or ""
    if answer_type:
        try:
            parse_answer_type(answer_type)
        except ValueError as error:
            raise ProgramError("error", str(error)) from None
    return code, answer_type


def first_annotation(source: str) -> str | None:
    """The annotation of the first argument of the last top-level `def f` (None if it has none)."""
    import ast

    definitions = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == "f"]
    arguments = definitions[-1].args.posonlyargs + definitions[-1].args.args if definitions else []
    annotation = arguments[0].annotation if arguments else None
    return None if annotation is None else ast.unparse(annotation)


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
        return "\n".join(["Traceback (program frames, most recent call last):", *lines[-frames:], message]
                         if lines else [message])
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


def call_function(function, source: str, text: str) -> list[str]:
    """Runs in a program's resident process: ["returned", "", the JSON text of `function(input)`], or
    [status, detail, ""] when it raised or returned something that is not JSON data."""
    try:
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


def build_root(python_dirs: list[str]) -> str:
    """A read-only root that holds only the system's libraries and programs and Python's stdlib,
    each at its own path: no home directories, no /run or /var (no unix sockets to reach), an
    empty /etc, a /dev with null, zero and urandom, /proc of this pid namespace and a small /tmp."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")  # host /tmp hidden too
    root = "/tmp/root"
    os.mkdir(root)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", *python_dirs]:
        inside = root + path
        if os.path.islink(path):
            os.symlink(os.readlink(path), inside)
        elif os.path.isdir(path) and not os.path.exists(inside):
            os.makedirs(inside, 0o755)
            _bind_read_only(path, inside)
    for path in ("/tmp", "/etc", "/proc", "/dev"):
        os.makedirs(root + path, 0o755, exist_ok=True)
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16k,mode=755")
    for device in ("null", "zero", "urandom", "random"):
        open(f"{root}/dev/{device}", "w").close()
        _bind_read_only(f"/dev/{device}", f"{root}/dev/{device}")
        _mount(None, f"{root}/dev/{device}", None, MS_REMOUNT | MS_BIND | MS_NOSUID)  # writable, devices allowed
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMP_SIZE},mode=1777")
    _mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return root


class Cgroup:
    """The cgroup(s) every runner and judge of one warden joins: memory and process count bounded
    per program (only one program runs under a warden at a time). cgroup v2 when the warden's
    parent cgroup delegates both controllers, else cgroup v1's memory and pids hierarchies."""

    def __init__(self, version: int, directories: list[str]):
        self.version, self.directories = version, directories

    @classmethod
    def create(cls, name: str, memory_bytes: int, processes: int) -> "Cgroup | None":
        """None where neither is available (not root, or no writable hierarchy)."""
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
            directories = [f"/sys/fs/cgroup/{controller}{paths.get(controller, '/')}".rstrip("/") + f"/{name}"
                           for controller in ("memory", "pids")]
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


def _unlock(directory: str) -> None:
    """Make a tree of directories writable and searchable by their owner again."""
    stack = [directory]
    while stack:
        path = stack.pop()
        try:
            os.chmod(path, 0o700)
            stack.extend(entry.path for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False))
        except OSError:
            pass


def _state(pid: int) -> str:
    """A process's state letter from /proc (R, S, D, T, Z, ...); "X" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "X"


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


# ---------------------------------------------------------------- the warden


class Warden:
    def __init__(self, settings: dict, namespaced: bool, cgroup: Cgroup | None):
        self.request_fd, self.reply_fd = settings["request_fd"], settings["reply_fd"]
        self.timeout, self.output_chars = settings["timeout"], settings["output_chars"]
        self.memory_bytes, self.recursion_limit = settings["memory_mb"] << 20, settings["recursion_limit"]
        self.namespaced, self.cgroup = namespaced, cgroup
        self.frame_limit = 2 * ANSWER_CHARS + 8 * self.output_chars + 65536  # UTF-8 and escapes included
        # What the resident process serves: ("judge", f, ans_type) or ("apply", source, function), and
        # what compiling it gave: the code (with f's answer type), or the ProgramError to repeat
        self.resident_key: tuple | None = None
        self.resident_code = None
        self.resident: tuple | None = None  # (pid, channel) of the live resident process
        self.program_uid = NOBODY if namespaced else os.getuid()
        self.nproc = None if cgroup else _tasks_of(self.program_uid) + PROGRAM_PROCESSES
        self.cgroup_fds, self.oom_fd = cgroup.open_files() if cgroup else ([], None)
        # The children's working directory, emptied after every program: the private /tmp, or
        # without namespaces a directory of the host's.
        self.workspace = "/tmp" if namespaced else tempfile.mkdtemp(prefix="codeplay-sandbox-")
        self.oom_count = oom_kills(self.oom_fd) if self.oom_fd is not None else 0
        self.address_space = 0  # RLIMIT_AS of a child: the warden's own size plus memory_mb

    def isolation(self) -> str:
        memory = self.memory_bytes >> 20
        if self.cgroup:
            limits = (f"cgroup v{self.cgroup.version}: {memory} MiB and {PROGRAM_PROCESSES} processes per program, "
                      f"and {memory} MiB per process")
        else:
            limits = (f"rlimits only: {memory} MiB per process, processes of uid {self.program_uid} "
                      f"capped at {self.nproc}")
        if self.namespaced:
            return (f"namespaces: pid+net+mount+ipc, read-only chroot, uid {NOBODY} (f: {JUDGE_UID}), "
                    "private /tmp per program; "
                    + limits)
        return ("basic (not root): own session only, no namespaces (network and files visible), a program can "
                "outlive a killed sandbox; " + limits)

    # ------------------------------------------------------------ the request loop

    def serve(self) -> None:
        with open("/proc/self/statm") as statm:
            self.address_space = int(statm.read().split()[0]) * resource.getpagesize() + self.memory_bytes
        gc.freeze()  # the warden's objects leave the collector's view: children do not copy them to collect
        write_all(self.reply_fd, pack("ready", self.isolation()))
        while True:
            request = read_frame(self.request_fd, 1 << 31)
            if request is None:
                return
            try:
                if request[0] == "run":
                    _, sequence, f, g, ans_type, typed = request
                    status, detail, seconds, output, answer, returned = self.run(f, g, ans_type if typed == "1" else None)
                    reply = pack("verdict", sequence, status, repr(seconds), detail, output, answer, returned)
                else:
                    _, sequence, source, function, text = request
                    status, detail, seconds, output, value = self.apply(source, function, text)
                    reply = pack("returned", sequence, status, repr(seconds), detail, output, value)
            except SupervisorGone:
                return
            write_all(self.reply_fd, reply)

    def run(self, f: str, g: str, ans_type: str | None) -> tuple[str, str, float, str, str, str]:
        """(status, detail, seconds, output, repr of g's answer, repr of what f returned) for one program."""
        started = time.monotonic()
        deadline = started + self.timeout
        try:
            f_code, answer_type = self._resident_code(("judge", f, ans_type), lambda: compile_puzzle(f, ans_type))
            g_code = compile_source(g, "g")
        except ProgramError as error:
            return error.status, error.detail, time.monotonic() - started, "", "", ""
        status, detail, answer, output = self._run_g(g_code, g, answer_type, deadline)
        returned = ""
        if status == "answer":
            status, detail, answer, returned, judge_output = self._judge(f_code, f, answer_type, detail, deadline)
            output += judge_output
        seconds = time.monotonic() - started
        if seconds > self.timeout and status != "timeout":
            status, detail = "timeout", f"g and f took {seconds:.2f} s, over the {self.timeout:g} s limit"
        if len(output) > self.output_chars + 200:  # g's and f's capped outputs together
            output = output[:self.output_chars] + "\n[... more characters dropped]"
        return status, detail[:DETAIL_CHARS], seconds, output, answer[:DETAIL_CHARS], returned[:DETAIL_CHARS]

    def apply(self, source: str, function: str, text: str) -> tuple[str, str, float, str, str]:
        """(status, detail, seconds, output, the JSON text `function` returned for the input `text`),
        in the program's resident process: started on first use, it keeps its state between calls."""
        started = time.monotonic()
        try:
            code = self._resident_code(("apply", source, function), lambda: compile_source(source, "program"))
        except ProgramError as error:
            return error.status, error.detail, time.monotonic() - started, "", ""
        reply = self._ask(lambda: self._apply_main(code, source, function), pack("call", text),
                          started + self.timeout, 4, CALL_STATUSES)
        status, detail, value, output = reply[0], reply[1], reply[2], reply[-1]
        seconds = time.monotonic() - started
        if seconds > self.timeout and status != "timeout":
            status, detail, value = "timeout", f"the call took {seconds:.2f} s, over the {self.timeout:g} s limit", ""
        return status, detail[:DETAIL_CHARS], seconds, output, value

    def _resident_code(self, key: tuple, compile_it) -> tuple:
        """What `compile_it()` gives for the resident `key` (compiled once while the key stays the
        same); a key that differs from the live resident's stops that process."""
        if self.resident_key != key:
            self._stop_resident()
            self.resident_key = key
            try:
                self.resident_code = compile_it()
            except ProgramError as error:
                self.resident_code = error
        if isinstance(self.resident_code, ProgramError):
            raise self.resident_code
        return self.resident_code

    def _ask(self, main, request: bytes, deadline: float, fields: int, statuses: tuple) -> tuple[str, ...]:
        """The reply fields after "done" of the resident process (started with `main` if none is live)
        to `request`: `fields` of them, the first a status in `statuses`; else an error or timeout
        padded to that length."""
        if self.resident is None:
            to_child_read, to_child_write = os.pipe()
            from_child_read, from_child_write = os.pipe()
            pid = self._fork([to_child_read, from_child_write], JUDGE_UID)
            if pid == 0:
                main()
            os.close(to_child_read)
            os.close(from_child_write)
            self.resident = (pid, Channel(from_child_read, to_child_write, self.frame_limit, self.request_fd))
        channel = self.resident[1]
        name = "f" if self.resident_key[0] == "judge" else "the program"
        try:
            reply = channel.receive(deadline) if channel.send(request, deadline) else None
        except Deadline:
            self._stop_resident()
            return ("timeout", f"{name} ran past the {self.timeout:g} s limit") + ("",) * (fields - 2)
        except ValueError as error:
            reply = [f"a malformed frame: {error}"]
        if reply is None or len(reply) != fields + 1 or reply[0] != "done" or reply[1] not in statuses:
            how = self._stop_resident()
            why = how if reply is None else "it broke the protocol"
            return ("error", f"{name}'s process ended without a reply: {why}") + ("",) * (fields - 2)
        return tuple(reply[1:])

    def _judge(self, code, f: str, answer_type: str, answer: str, deadline: float) -> tuple[str, ...]:
        """(status, detail, answer repr, returned repr, output) of f on the answer, in the puzzle's judge."""
        return self._ask(lambda: self._judge_main(code, f, answer_type), pack("judge", answer), deadline, 5,
                         JUDGE_STATUSES)

    def _stop_resident(self) -> str:
        """Kill the live resident process and everything it started; says how it had ended."""
        if self.resident is None:
            return "it was not running"
        pid, channel = self.resident
        self.resident = None
        channel.close()
        how = self._end(pid)
        self._kill_strays()
        self._empty_workspace()
        return how

    def _run_g(self, code, g: str, answer_type: str, deadline: float) -> tuple[str, str, str, str]:
        """("answer", JSON text, answer repr, output), or (status, detail, answer repr or "", output)
        of a program that gave no answer to judge."""
        read_fd, write_fd = os.pipe()
        pid = self._fork([write_fd], NOBODY)
        if pid == 0:
            self._runner_main(code, g, answer_type)
        os.close(write_fd)
        channel = Channel(read_fd, None, self.frame_limit, self.request_fd)
        problem = None
        try:
            reply = channel.receive(deadline)
        except Deadline:
            reply, problem = None, ("timeout", f"g ran past the {self.timeout:g} s limit", "", "")
        except ValueError as error:
            reply, problem = None, ("error", f"g's process sent a malformed frame: {error}", "", "")
        finally:
            channel.close()
        how = self._end(pid)
        self._kill_strays(spare=self.resident[0] if self.resident else None)
        self._empty_workspace()  # before the judge sees the answer: nothing else of g's reaches f
        if self.resident is not None and _state(self.resident[0]) not in "RSD":  # without namespaces a runner
            self._stop_resident()  # shares the judge's uid: one it stopped or killed is replaced, not blamed
        if self.oom_fd is not None and self.oom_count < (count := oom_kills(self.oom_fd)):
            self.oom_count = count  # one of the program's processes was killed for its memory
            return "memory", f"the program's processes ran out of their {self.memory_bytes >> 20} MiB", "", ""
        if reply is not None and len(reply) == 4 and reply[0] in RUNNER_STATUSES:
            return tuple(reply)
        if problem is not None:
            return problem
        return "error", f"g's process ended without an answer: {how}", "", ""

    def _fork(self, keep: list[int], uid: int) -> int:
        """Fork a runner or a judge; in the child, isolate it, keep only the `keep` fds (as 3, 4, ...)
        and, with namespaces, run as `uid`."""
        pid = os.fork()
        if pid:
            return pid
        try:
            for fd in self.cgroup_fds:
                os.write(fd, b"0")
            if self.namespaced:
                _check(_libc.unshare(CLONE_NEWIPC), "unshare")  # SysV objects die with the program
            os.chdir(self.workspace)
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
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
            _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            sys.setrecursionlimit(self.recursion_limit)
            sys.set_int_max_str_digits(0)  # P3 predates the limit; huge conversions meet the timeout instead
            random.seed(0)
            self.output = sys.stdout = sys.stderr = CappedOutput(self.output_chars)
            return 0
        except BaseException:  # noqa: BLE001
            os._exit(70)

    def _runner_main(self, code, g: str, answer_type: str) -> None:
        try:
            write_all(3, pack(*run_g(code, g, answer_type), self.output.value()))
        finally:
            os._exit(0)

    def _judge_main(self, code, f: str, answer_type: str) -> None:
        output = self.output
        try:
            try:
                instantiate(code, "f")  # f's module-level code runs once here, as a check
            except BaseException as error:  # noqa: BLE001
                status = error.status if isinstance(error, ProgramError) else "error"
                detail = error.detail if isinstance(error, ProgramError) else describe(error, "f", f)
                while read_frame(3, 1 << 31) is not None:  # every answer gets the same verdict
                    write_all(4, pack("done", status, detail, "", "", output.value()))
                return
            while (request := read_frame(3, 1 << 31)) is not None:
                output.parts, output.size, output.dropped = [], 0, 0
                write_all(4, pack("done", *judge_answer(code, f, answer_type, request[1]), output.value()))
        finally:
            os._exit(0)

    def _apply_main(self, code, source: str, name: str) -> None:
        output = self.output
        try:
            try:
                namespace = {"__builtins__": builtins, "__name__": "__program__"}
                exec(code, namespace)  # the module runs once; its state lives as long as this process
                function = namespace.get(name)
                if not callable(function):
                    raise ProgramError("error", f"the program defines no function {name}")
            except BaseException as error:  # noqa: BLE001
                status = error.status if isinstance(error, ProgramError) else "error"
                detail = error.detail if isinstance(error, ProgramError) else describe(error, "program", source)
                while read_frame(3, 1 << 31) is not None:  # every call gets the same reply
                    write_all(4, pack("done", status, detail, "", output.value()))
                return
            while (request := read_frame(3, 1 << 31)) is not None:
                output.parts, output.size, output.dropped = [], 0, 0
                write_all(4, pack("done", *call_function(function, source, request[1]), output.value()))
        finally:
            os._exit(0)

    # ------------------------------------------------------------ processes

    def shutdown(self) -> None:
        """Without a pid namespace nothing else takes the children down with the warden."""
        self._stop_resident()
        self._kill_strays()
        if not self.namespaced:
            shutil.rmtree(self.workspace, ignore_errors=True)

    def _empty_workspace(self) -> None:
        """Remove everything the programs wrote (the warden is root where they are not)."""
        for entry in os.scandir(self.workspace):
            if entry.is_dir(follow_symlinks=False):
                if not self.namespaced:  # the warden has the programs' uid: reopen what they locked
                    _unlock(entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)

    def _end(self, pid: int) -> str:
        """Kill and reap one child; says how it had ended."""
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, WALL)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            return "killed" if number == signal.SIGKILL else f"killed by {signal.Signals(number).name}"
        return f"exit code {os.WEXITSTATUS(status)}"

    def _kill_strays(self, spare: int | None = None) -> None:
        """Kill every child but `spare` until none is left. Orphans are re-parented to the warden
        (PID 1 of its namespace, or a subreaper), so a program's whole tree ends here."""
        deadline = time.monotonic() + KILL_SECONDS
        while strays := [pid for pid in self._children() if pid != spare]:
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in strays:
                try:
                    os.waitpid(pid, WALL)
                except ChildProcessError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("could not stop the processes a program left behind")

    @staticmethod
    def _children() -> list[int]:
        pids = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as children:
                pids += [int(pid) for pid in children.read().split()]
        return pids


def main() -> None:
    settings = json.loads(sys.argv[1])
    reply_fd = settings["reply_fd"]
    sys.set_int_max_str_digits(0)  # compiling f and g: P3 has int literals of thousands of digits
    namespaced = os.geteuid() == 0 and _libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC) == 0
    cgroup = None
    if os.geteuid() == 0:
        cgroup = Cgroup.create(f"codeplay-{os.getpid()}", (settings["memory_mb"] << 20) + (64 << 20),
                               PROGRAM_PROCESSES + 1)  # + 1: the judge
    pid = os.fork()
    if pid:  # launcher: report the warden's pid, then mirror its exit status
        write_all(reply_fd, pack("pid", str(pid)))
        os.close(settings["request_fd"])
        os.close(reply_fd)
        _, status = os.waitpid(pid, 0)
        if cgroup:
            cgroup.remove()
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    try:
        stdlib = os.path.dirname(os.__file__)
        sys.path[:] = [path for path in sys.path if path.startswith(stdlib)] + settings["module_roots"]
        for name in PRELOADED + tuple(settings["modules"]):
            __import__(name)
        warden = Warden(settings, namespaced, cgroup)
        if namespaced:  # the extra modules' directories only, at their own paths: nothing else of site-packages
            root = build_root([stdlib, *settings["module_dirs"]])
            os.chroot(root)
            os.chdir("/")
        else:
            os.setsid()
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
        _libc.prctl(PR_SET_DUMPABLE, 0)  # programs of the same uid cannot ptrace the warden
        try:
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
