"""The sandbox worker: a long-lived process that runs puzzle programs one after another.

Started by `Sandbox` as `python -s -S worker.py ARGS_JSON` with two inherited pipe fds; standard
library only (the package is not importable in here on purpose). Lifecycle:

  launcher ──fork──> worker (PID 1 of fresh pid/net/mount namespaces when root)
                     ├─ private tmpfs /tmp, stdlib bind-mounted read-only, drop to uid 65534
                     ├─ preload stdlib modules, snapshot the interpreter state, rlimits
                     └─ loop: read request → run f(g()) → restore/verify state → write verdict

Running programs in-process is what makes the sandbox fast (no fork per program); what keeps it
correct is that after every program the interpreter state is restored where that is cheap and
verified where it is not. A worker whose state cannot be vouched for says so in its reply
(`recycle`) and exits; the supervisor starts a fresh one. The launcher stays outside the
namespaces so the supervisor learns the worker's pid and exit status.
"""

from __future__ import annotations

import builtins
import ctypes
import decimal
import gc
import json
import operator
import os
import random
import re
import reprlib
import resource
import signal
import struct
import sys
import time
import traceback

HEADER = struct.Struct(">I")  # every message: 4-byte big-endian length, then UTF-8 JSON
NOBODY = 65534

# Preloaded before privileges are dropped, and watched for tampering after every program.
WATCHED_MODULES = (
    "math", "cmath", "itertools", "functools", "collections", "heapq", "bisect", "operator",
    "re", "string", "random", "statistics", "fractions", "decimal", "typing", "copy", "json",
    "datetime", "time", "hashlib", "array", "os", "sys", "json.encoder", "json.decoder", "struct",
    "gc", "signal", "reprlib", "traceback", "resource", "operator", "ast",
)
RESET_SIGNALS = (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF, signal.SIGINT, signal.SIGTERM,
                 signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP)
P3_BASE_TYPES = {"bool": bool, "int": int, "float": float, "str": str}
RSS_GROWTH_LIMIT = 256 << 20  # bytes a program may leave resident before the worker is recycled

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


# ---------------------------------------------------------------- framing


def write_message(fd: int, message: dict) -> None:
    payload = json.dumps(message).encode()
    data = HEADER.pack(len(payload)) + payload
    while data:
        data = data[os.write(fd, data):]


def _read_exact(fd: int, size: int) -> bytes:
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> dict:
    (size,) = HEADER.unpack(_read_exact(fd, HEADER.size))
    return json.loads(_read_exact(fd, size))


# ---------------------------------------------------------------- isolation


def enter_namespaces() -> bool:
    """Unshare pid, network and mount namespaces (root only). The next fork becomes PID 1."""
    if os.geteuid() != 0:
        return False
    return _libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET) == 0


def isolate_filesystem(stdlib: str) -> str:
    """Private /proc and tmpfs mounts; the stdlib bind-mounted read-only where uid 65534 can read it
    (it may live under a 0700 home). Returns the stdlib's path inside the sandbox."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)  # world-writable dirs such as /run/lock
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    visible_stdlib = "/tmp/.stdlib"
    os.mkdir(visible_stdlib)
    _mount(stdlib, visible_stdlib, None, MS_BIND | MS_REC)
    _mount(None, visible_stdlib, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return visible_stdlib


def drop_privileges() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def set_limits(memory_bytes: int) -> None:
    with open("/proc/self/statm") as statm:
        virtual_now = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (virtual_now + memory_bytes,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20,) * 2)


# ---------------------------------------------------------------- running one program


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


def type_matches(answer, type_text: str) -> bool:
    """P3's answer check: exact types (no subclasses), `List[...]` nested over bool/int/float/str."""
    depth = 0
    while type_text.startswith(("List[", "list[")) and type_text.endswith("]"):
        type_text, depth = type_text[5:-1].strip(), depth + 1
    base = P3_BASE_TYPES[type_text]

    def check(obj, level: int) -> bool:
        if level == 0:
            return type(obj) is base
        return type(obj) is list and all(check(item, level - 1) for item in obj)

    return check(answer, depth)


def first_annotation(tree, name: str) -> str | None:
    import ast

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name and node.args.args:
            annotation = node.args.args[0].annotation
            return None if annotation is None else ast.unparse(annotation)
    return None


class ProgramError(Exception):
    """A verdict reached before f(g()) could be evaluated."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


_compiled: dict[tuple[str, str], tuple] = {}


def compile_function(source: str, name: str):
    """(code, first-argument annotation) for a source that must define `name`; cached by source."""
    key = (name, source)
    if key not in _compiled:
        import ast

        try:
            tree = ast.parse(source, filename=f"<{name}>")
        except SyntaxError as error:
            raise ProgramError("syntax", f"{name}: {error.msg} (line {error.lineno})") from None
        except (ValueError, MemoryError, RecursionError) as error:  # null bytes, absurd nesting
            raise ProgramError("syntax", f"{name}: {type(error).__name__}: {error}") from None
        if len(_compiled) > 4096:
            _compiled.clear()
        _compiled[key] = (compile(tree, f"<{name}>", "exec"), first_annotation(tree, name))
    return _compiled[key]


def instantiate(code, name: str, namespace_base: dict):
    namespace = dict(namespace_base)
    exec(code, namespace)
    function = namespace.get(name)
    if not callable(function):
        raise ProgramError("syntax", f"the {name} source defines no function {name}")
    return function


def short_traceback(error: BaseException, sources: dict[str, str], frames: int = 4) -> str:
    """`Type: message` plus the last frames inside the program itself, with their source lines."""
    lines = []
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename in sources:
            code_lines = sources[frame.filename].splitlines()
            text = code_lines[frame.lineno - 1].strip() if 0 < (frame.lineno or 0) <= len(code_lines) else ""
            lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n    {text}')
    message = f"{type(error).__name__}: {_safe_repr_text(error)}"
    return "\n".join(["Traceback (program frames, most recent call last):", *lines[-frames:], message]
                     if lines else [message])


def describe(error: BaseException, request: dict) -> str:
    try:
        return short_traceback(error, {"<f>": request["f"], "<g>": request["g"]})
    except BaseException:  # noqa: BLE001 - the program broke what describing needs (its state is repaired next)
        return "an error that could not be described"


def _safe_repr_text(error: BaseException) -> str:
    try:
        return str(error)[:1000]
    except BaseException:  # noqa: BLE001 - an exception whose __str__ raises
        return "<unprintable>"


def safe_repr(value) -> str:
    try:
        return reprlib.repr(value)
    except BaseException:  # noqa: BLE001 - a program's object whose __repr__ raises
        return f"<unprintable {type(value).__name__}>"


def program_globals() -> dict:
    """What every program starts with, as in P3's judge: builtins and `List`."""
    return {"__builtins__": builtins, "__name__": "__puzzle__", "List": sys.modules["typing"].List}


def run_program(f_source: str, g_source: str, ans_type: str | None, base: dict) -> tuple[str, object]:
    """Status and detail (text, or the exception, for the caller to describe with `describe`)."""
    try:
        # f and g get separate namespaces: g cannot redefine f or its globals. f is checked before g
        # runs, but the f that judges the answer is made after g returned (g could reach the first
        # one through frames or gc), from code compiled before g ran.
        f_code, annotation = compile_function(f_source, "f")
        instantiate(f_code, "f", base)
        g = instantiate(compile_function(g_source, "g")[0], "g", base)
        answer = g()
        f = instantiate(f_code, "f", base)
        expected_type = ans_type or annotation
        if expected_type is not None:
            try:
                matches = type_matches(answer, expected_type)
            except KeyError:
                return "error", f"unsupported answer type {expected_type!r} (P3 types: bool, int, float, str, nested List)"
            if not matches:
                return "fail", f"answer {safe_repr(answer)} is not of type {expected_type}"
        result = f(answer)
        if result is True:
            return "pass", ""
        return "fail", f"f returned {safe_repr(result)} for x = {safe_repr(answer)}"
    except ProgramError as error:
        return error.status, error.detail
    except MemoryError as error:
        return "memory", error
    except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, anything a program raises
        return "error", error


# ---------------------------------------------------------------- state: snapshot, restore, verify


class WatchedDict:
    """A dict that a program must not change (a module's or a class's namespace, sys.modules...).

    CPython stamps a dict with a fresh version tag on every write (PEP 509); reading the tag is
    O(1), so the entries are compared (by identity, in order: a program's object could fake
    equality) only for the few dicts that were written at all. Where the tag cannot be read,
    every check compares the entries."""

    __slots__ = ("name", "owner", "live", "keys", "values", "tag", "version")

    def __init__(self, name: str, owner, live: dict):
        self.name, self.owner, self.live = name, owner, live
        self.keys, self.values = tuple(live.keys()), tuple(live.values())
        self.tag = _version_tag(live) if _VERSION_TAGS_WORK else None
        self.version = None if self.tag is None else self.tag.value

    def changed(self) -> bool:
        if self.tag is not None and self.tag.value == self.version:
            return False
        live, keys, values = self.live, self.keys, self.values
        same = (_len(live) == _len(keys) and _all(_map(_is, live.values(), values))
                and _all(_map(_is, live.keys(), keys)))
        if same and self.tag is not None:
            self.version = self.tag.value  # written, but back to the same entries
        return not same

    def only_gained_modules(self) -> bool:
        """Importing a package's submodule adds it as an attribute: legitimate, and undone by
        `restore` just as the import itself is forgotten from sys.modules."""
        live = self.live
        if not _all(_map(_is, _map(live.get, self.keys), self.values)):
            return False
        return _all(_type(live[key]) is _module_type for key in live if key not in self.keys)

    def restore(self) -> None:
        if _type(self.owner) is _type_type:  # a class: only through its attributes
            for key in [key for key in self.live if key not in self.keys]:
                _delattr(self.owner, key)
            for key, value in _zip(self.keys, self.values):
                if self.live.get(key) is not value:
                    _setattr(self.owner, key, value)
        else:
            self.live.clear()
            self.live.update(_zip(self.keys, self.values))
        if self.tag is not None:
            self.version = self.tag.value


def _version_tag(namespace: dict):
    # PyDictObject: PyObject_HEAD (16 bytes), ma_used (8), then the uint64 ma_version_tag.
    return ctypes.c_uint64.from_address(id(namespace) + 24)


def _version_tags_work() -> bool:
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12) or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False  # the tag is deprecated from 3.12 on (PEP 699): compare entries instead
    probe = {"a": 1}
    tag = _version_tag(probe)
    before = tag.value
    unchanged = tag.value == before
    probe["a"] = 2
    return unchanged and tag.value != before


_VERSION_TAGS_WORK = _version_tags_work()
# Bound at import: a program may replace builtins, and the repair runs before they are trusted.
_len, _all, _map, _zip, _is = len, all, map, zip, operator.is_
_type, _type_type, _setattr, _delattr, _module_type = type, type, setattr, delattr, type(sys)


class InterpreterState:
    """What a program could change to influence later programs, captured once after start-up."""

    def __init__(self, recursion_limit: int):
        self.recursion_limit = recursion_limit
        modules = [sys.modules[name] for name in ("builtins", "__main__", *WATCHED_MODULES)]
        classes = [value for module in modules for value in vars(module).values()
                   if isinstance(value, type) and value.__module__ == module.__name__ != "typing"]
        self.namespaces = [WatchedDict(module.__name__, module, vars(module)) for module in modules]
        self.namespaces += [WatchedDict(f"{cls.__module__}.{cls.__name__}", cls, gc.get_referents(vars(cls))[0])
                            for cls in classes]
        self.modules = WatchedDict("sys.modules", sys, sys.modules)
        self.environ = WatchedDict("os.environ", os, os.environ._data)
        self.sys_lists = {name: list(getattr(sys, name)) for name in ("path", "meta_path", "path_hooks")}
        self.signals = {number: signal.getsignal(number) for number in RESET_SIGNALS}
        self.fd_count = len(os.listdir("/proc/self/fd"))
        self.resident = _process_stat()[1]

    def prepare(self, workdir: str, output: CappedOutput) -> None:
        os.chdir(workdir)
        random.seed(0)
        decimal.setcontext(decimal.Context())
        sys.setrecursionlimit(self.recursion_limit)
        sys.set_int_max_str_digits(0)  # P3 predates the limit; huge conversions meet the timeout instead
        sys.stdout = sys.stderr = output

    def repair_namespaces(self) -> list[str]:
        """Put back every watched namespace the program changed; returns their names.

        Runs first after a program, before this worker's own code trusts `len`, `json.dumps` or
        `os.write` again, so it only calls builtins bound at import time."""
        sys.stdout, sys.stderr, sys.stdin = sys.__stdout__, sys.__stderr__, sys.__stdin__
        changed = []
        for namespace in self.namespaces:
            if namespace.changed():
                if not namespace.only_gained_modules():
                    changed.append(namespace.name)
                namespace.restore()
        return changed

    def restore(self) -> list[str]:
        """Undo the cheap, legitimate changes (timers, signals, environment, imports); returns the
        modules the program replaced in sys.modules (new imports are just forgotten)."""
        sys.settrace(None)
        sys.setprofile(None)
        signal.alarm(0)
        for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            signal.setitimer(timer, 0)
        for number, handler in self.signals.items():
            if signal.getsignal(number) is not handler:
                signal.signal(number, handler)
        for name, saved in self.sys_lists.items():
            getattr(sys, name)[:] = saved
        if self.environ.changed():
            self.environ.restore()
        replaced = []
        if self.modules.changed():
            saved = dict(zip(self.modules.keys, self.modules.values))
            replaced = [name for name, module in saved.items() if sys.modules.get(name) is not module]
            self.modules.restore()  # a module imported by the program is re-executed by a later import
        os.umask(0o077)
        re.purge()  # a program could plant a compiled pattern in the cache for a later one
        gc.enable()
        if gc.collect():  # finalizers now, not during a later program: of modules forgotten above, say
            replaced += self.repair_namespaces()
            if gc.collect():
                replaced.append("objects that keep resurrecting")
        return replaced

    def leftovers(self) -> list[str]:
        """Things that outlived the program: threads, processes, open files, memory."""
        problems = []
        threads, resident = _process_stat()
        if threads > 1:
            problems.append(f"{threads - 1} thread(s) still running")
        if _live_children():
            problems.append("child processes still running")
        if len(os.listdir("/proc/self/fd")) > self.fd_count:
            problems.append("file descriptors left open")
        if resident > self.resident + RSS_GROWTH_LIMIT:
            problems.append("memory left allocated")
        return problems


def _process_stat() -> tuple[int, int]:
    """(threads, resident bytes) from one read of /proc/self/stat."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[17]), int(fields[21]) * resource.getpagesize()


def _live_children() -> bool:
    """Reap finished children; True when some still run (orphans are reparented to this worker)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _kill_descendants() -> None:
    """Without a pid namespace, take down whatever the programs started before exiting."""
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as children:
                pids = [int(pid) for pid in children.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# ---------------------------------------------------------------- main


def _refuse_audit_hooks(event: str, args: tuple) -> None:
    """Audit hooks cannot be removed: one added by a program would run inside every later program."""
    if event == "sys.addaudithook":
        raise RuntimeError("no audit hooks in the sandbox")  # a RuntimeError here refuses the new hook


def _pipe_identities(*fds: int) -> list:
    identities = []
    for fd in fds:
        try:
            stat = os.fstat(fd)
            identities.append((stat.st_dev, stat.st_ino))
        except OSError:
            identities.append(None)
    return identities


def serve(request_fd: int, reply_fd: int, settings: dict, isolation: str) -> None:
    state = InterpreterState(settings["recursion_limit"])
    base_namespace = tuple(program_globals().items())  # immutable: a program reaching it cannot plant names
    pipes = _pipe_identities(request_fd, reply_fd)
    sys.addaudithook(_refuse_audit_hooks)
    home = os.getcwd()
    workdir = os.path.join(home, "program")
    os.mkdir(workdir, 0o700)
    gc.freeze()  # start-up objects leave the collector's view: per-program collections stay cheap
    write_message(reply_fd, {"ready": True, "isolation": isolation})
    while True:
        try:
            request = read_message(request_fd)
        except EOFError:
            return
        output = CappedOutput(settings["output_chars"])
        state.prepare(workdir, output)
        started = time.perf_counter()
        status, detail = run_program(request["f"], request["g"], request.get("ans_type"), base_namespace)
        # Program code can still run: in describing its exception (__str__), in finalizers as its
        # last objects go. Both happen here, before the repair, so that it sees what they did.
        if isinstance(detail, BaseException):
            detail = describe(detail, request)
        resurrecting = gc.collect() and gc.collect()  # finalizers that leave new garbage behind
        changed = state.repair_namespaces()
        seconds = time.perf_counter() - started
        os.chdir(home)
        changed += state.restore() + (["objects that keep resurrecting"] if resurrecting else [])
        if changed:
            status, detail = "error", "the program modified shared interpreter state: " + ", ".join(changed[:5])
        recycle = changed + state.leftovers() + (["memory exhausted"] if status == "memory" else [])
        if _pipe_identities(request_fd, reply_fd) != pipes:
            recycle.append("the program replaced the sandbox's pipes")
        if not _empty_directory(workdir):
            recycle.append("undeletable files in the working directory")
        write_message(reply_fd, {"id": request["id"], "status": status, "detail": detail,
                                 "seconds": seconds, "output": output.value(), "recycle": recycle})
        if recycle:
            return


def _empty_directory(path: str) -> bool:
    """Leave the working directory as fresh as new for the next program."""
    try:
        if not os.listdir(path):  # the common case: the program wrote nothing
            return True
        import shutil

        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        return not os.listdir(path)
    except OSError:
        return False


def main() -> None:
    settings = json.loads(sys.argv[1])
    request_fd, reply_fd = settings["request_fd"], settings["reply_fd"]
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != settings["supervisor_pid"]:
        os._exit(1)  # the supervisor died before we could ask to follow it
    namespaced = enter_namespaces()
    pid = os.fork()
    if pid:  # launcher: report the worker's pid, then mirror its exit status
        write_message(reply_fd, {"pid": pid})
        os.close(request_fd)
        os.close(reply_fd)
        _, status = os.waitpid(pid, 0)
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    try:
        os.setsid()
        for name in WATCHED_MODULES:
            __import__(name)
        stdlib = os.path.dirname(os.__file__)
        if namespaced:
            visible_stdlib = isolate_filesystem(stdlib)
            sys.path[:] = [p.replace(stdlib, visible_stdlib, 1) for p in sys.path if p.startswith(stdlib)]
            for module in list(sys.modules.values()):  # preloaded packages: later submodule imports
                if type(getattr(module, "__path__", None)) is list:  # (encodings.idna, json.tool)
                    module.__path__[:] = [p.replace(stdlib, visible_stdlib, 1) for p in module.__path__]
            home = "/tmp/work"
            os.mkdir(home, 0o700)
            os.chown(home, NOBODY, NOBODY)
            drop_privileges()
            isolation = "namespaces: pid+net+mount, uid 65534, private /tmp"
        else:
            sys.path[:] = [p for p in sys.path if p.startswith(stdlib)]
            import tempfile

            home = tempfile.mkdtemp(prefix="codeplay-sandbox-")
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
            isolation = "basic: rlimits and own session only (not root, so no namespaces or uid drop; network open)"
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # cleared by the uid change; follow the launcher
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        os.chdir(home)
        os.umask(0o077)
        set_limits(settings["memory_mb"] << 20)
        sys.stdin = sys.__stdin__
        serve(request_fd, reply_fd, settings, isolation)
    except BaseException:  # noqa: BLE001 - report any start-up or loop failure to the supervisor
        try:
            write_message(reply_fd, {"fatal": traceback.format_exc(limit=5)})
        except OSError:
            pass
    finally:
        if not namespaced:
            _kill_descendants()
        os._exit(0)


if __name__ == "__main__":
    main()
