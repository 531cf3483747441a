"""The supervisor side of the sandbox: a pool of wardens (the package `warden/`) fed over pipes.

    with Sandbox(workers=2, timeout=1.0) as sandbox:
        verdicts = sandbox.verify([Program(f=..., g=..., ans_type="List[int]")])

A warden judges one program at a time and never runs program code itself: g runs in a process
used once, f in another, both forked from a zygote that never saw a program, and the verdict comes
from the process that ran f on g's answer, passed as JSON data. The supervisor trusts no byte it
reads either: every reply must be a bounded frame of a fixed shape (`warden.protocol.pack`, with the
fields of its frame classes) answering the request it was sent, read without blocking and under a
deadline, as is every write. A warden that sends anything else, stops answering or dies is killed
(its namespace and every program process with it) and replaced, and its program runs once more on
a fresh warden before it is called an error: nothing a child does raises in the caller.
"""

import ctypes
import importlib.util
import json
import math
import os
import selectors
import signal
import subprocess
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from codeplay_lightning.execution.api import (
    Call,
    IsolationError,
    Program,
    Verdict,
    checked_timeout,
    checked_workers,
)
from codeplay_lightning.execution.warden.answers import ANSWER_BYTES, decode_answer, parse_answer_type
from codeplay_lightning.execution.warden.protocol import (
    CALL_STATUSES,
    JUDGE_ERROR,
    VERDICT_STATUSES,
    ApplyRequest,
    FrameReader,
    ReadyReply,
    ReturnedReply,
    RunRequest,
    VerdictReply,
    frame_limit,
    pack,
    wall_guard,
)

EXECUTION = Path(__file__).parent  # the warden package's folder: wardens run from it, as `python -m warden`
WARDEN = ("-m", "warden")
LEVELS = ("basic", "partial", "full")  # isolation levels, least first (`Sandbox.level`)
STARTUP_SECONDS = 60.0
REPLY_SLACK = 2.0  # seconds a warden may take past a program's wall guard (forks, kills) before it is presumed stuck
SOURCE_BYTES = 1 << 20  # of a program's f, g, source or answer type as UTF-8: more is an error before any warden
PR_SET_DUMPABLE = 4


@dataclass(eq=False)
class _Warden:
    launcher: subprocess.Popen  # the warden is its only child
    request_fd: int
    reply_fd: int
    reader: FrameReader
    started: float
    pid: int | None = None  # the warden's pid, as the supervisor sees it
    ready: bool = False
    isolation: str = ""
    level: str = ""
    exposure: str = ""
    outbox: bytearray = field(default_factory=bytearray)
    task: int | None = None  # index of the program it is judging
    sequence: int = 0
    deadline: float = 0.0


class Sandbox:
    """A pool of sandbox wardens. Use as a context manager, or call `close()`.

    Every warden reports how well it isolates programs; one that isolates less than the first
    (`isolation`) or less than fully (`level`) gets a one-line warning, or with `require_isolation` an
    IsolationError before any program runs on it."""

    def __init__(
        self,
        workers: int = 2,
        timeout: float = 1.0,
        memory_mb: int = 1024,
        output_chars: int = 4096,
        recursion_limit: int = 10_000,
        modules: Sequence[str] = (),
        require_isolation: bool = False,
    ):
        checked_workers(workers)
        checked_timeout(timeout)
        if type(memory_mb) is not int or memory_mb < 64:
            raise ValueError(f"memory_mb must be a whole number of at least 64, got {memory_mb!r}")
        self.size, self.timeout, self.require_isolation = workers, float(timeout), require_isolation
        self._settings = {
            "timeout": self.timeout,
            "memory_mb": memory_mb,
            "output_chars": output_chars,
            "recursion_limit": recursion_limit,
            "modules": list(modules),
            **_module_locations(modules),
        }
        self._frame_limit = frame_limit(output_chars)
        self._wardens: list[_Warden] = []
        self._selector = selectors.DefaultSelector()
        self.busy_seconds = 0.0  # wall time spent in verify(), for the share of an iteration it takes
        self._reported: str | None = None  # the first warden's isolation: what every other must match
        self._warned: set[str] = set()
        if os.geteuid() != 0:  # programs may run as this uid: none may reopen this process's pipes through /proc
            ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # (nor read its memory, nor ptrace it)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def isolation(self) -> str:
        """How strongly programs are isolated here, in words (docs/sandbox.md), once every warden is up."""
        self._fill_pool()
        while not all(warden.ready for warden in self._wardens):
            self._pump(None, time.monotonic() + 0.1)
            self._fill_pool()
        return self._reported

    @property
    def level(self) -> str:
        """The isolation's level: full (namespaces, seccomp, and each program bounded as one: as root by a cgroup,
        else as one process in a user namespace), partial (no seccomp filter on this architecture) or basic (no
        namespaces); the least any warden offers."""
        _ = self.isolation
        return min((warden.level for warden in self._wardens), key=LEVELS.index)

    def verify(
        self, programs: Sequence[Program], on_verdict: Callable[[int, Verdict], None] | None = None
    ) -> list[Verdict]:
        """One verdict per program, in order. `on_verdict(index, verdict)` is called as each lands."""
        return self._execute(programs, on_verdict)

    def apply(self, calls: Sequence[Call], on_verdict: Callable[[int, Verdict], None] | None = None) -> list[Verdict]:
        """One verdict per call, in order: "returned" with the function's `value`, or why not (error,
        timeout, memory, syntax). Each call runs in a fresh process."""
        for call in calls:
            if len(json.dumps(call.input)) > ANSWER_BYTES:
                raise ValueError(f"a call's input is over {ANSWER_BYTES} bytes as JSON")
        return self._execute(calls, on_verdict)

    def _execute(self, tasks: Sequence[Program | Call], on_verdict) -> list[Verdict]:
        started = time.perf_counter()
        batch = Batch(tasks, on_verdict)
        for index, task in enumerate(tasks):
            if (refusal := _refusal(task)) is not None:  # a verdict at once: nothing of it reaches a warden
                batch.pending.remove(index)
                batch.finish(index, Verdict("error", refusal, 0.0))
        try:
            while batch.remaining:
                self._fill_pool()
                for warden in self._wardens:
                    if warden.ready and warden.task is None and batch.pending:
                        self._dispatch(warden, batch)
                deadlines = [w.deadline for w in self._wardens if w.task is not None]
                self._pump(batch, min(deadlines, default=time.monotonic() + 1.0))
        except BaseException:
            for warden in [w for w in self._wardens if w.task is not None]:  # their programs die with this call
                self._discard(warden)
            raise
        self.busy_seconds += time.perf_counter() - started
        return batch.results  # type: ignore[return-value]

    def close(self) -> None:
        """Closing a warden's request pipe makes it stop its programs and exit."""
        for warden in self._wardens:
            if warden.request_fd in self._selector.get_map():
                self._selector.unregister(warden.request_fd)
            os.close(warden.request_fd)
            warden.request_fd = -1
        for warden in list(self._wardens):
            try:
                warden.launcher.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
            self._discard(warden)

    # ------------------------------------------------------------ pool mechanics

    def _fill_pool(self) -> None:
        while len(self._wardens) < self.size:
            self._wardens.append(self._spawn())

    def _spawn(self) -> _Warden:
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        settings = dict(self._settings, request_fd=request_read, reply_fd=reply_write)
        launcher = subprocess.Popen(
            [sys.executable, "-s", "-S", *WARDEN, json.dumps(settings)],
            cwd=EXECUTION,
            pass_fds=(request_read, reply_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={
                "PATH": "/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "PYTHONHASHSEED": "0",
                "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1",
            },  # numpy's BLAS: no threads to fork
        )
        os.close(request_read)
        os.close(reply_write)
        for fd in (request_write, reply_read):
            os.set_blocking(fd, False)
        warden = _Warden(launcher, request_write, reply_read, FrameReader(self._frame_limit), time.monotonic())
        self._selector.register(reply_read, selectors.EVENT_READ, warden)
        return warden

    def _dispatch(self, warden: _Warden, batch: "Batch") -> None:
        index = batch.pending.popleft()
        task = batch.tasks[index]
        warden.task, warden.sequence = index, warden.sequence + 1
        warden.deadline = time.monotonic() + wall_guard(self.timeout) + REPLY_SLACK
        sequence = str(warden.sequence)
        if isinstance(task, Call):
            warden.outbox += pack("apply", *ApplyRequest(sequence, task.source, task.function, json.dumps(task.input)))
        else:
            annotated = "1" if task.ans_type is None else ""  # f's annotation: the warden reads it (never this process)
            warden.outbox += pack("run", *RunRequest(sequence, task.f, task.g, task.ans_type or "", annotated))
        self._flush(warden)

    def _flush(self, warden: _Warden) -> None:
        """Write what the pipe takes now; the rest when the selector says it is writable."""
        try:
            written = os.write(warden.request_fd, warden.outbox)
            del warden.outbox[:written]
        except BlockingIOError:
            pass
        except BrokenPipeError:
            warden.outbox.clear()  # the warden is gone: its reply pipe reports the end of file
        registered = warden.request_fd in self._selector.get_map()
        if warden.outbox and not registered:
            self._selector.register(warden.request_fd, selectors.EVENT_WRITE, warden)
        elif registered and not warden.outbox:
            self._selector.unregister(warden.request_fd)

    def _pump(self, batch: "Batch | None", wake: float) -> None:
        """Read and write until `wake`; handle replies and any overrun."""
        for key, _ in self._selector.select(max(0.0, wake - time.monotonic())):
            warden: _Warden = key.data
            if warden not in self._wardens:  # discarded earlier in this loop
                continue
            if key.fd == warden.request_fd:
                self._flush(warden)
                continue
            chunk = os.read(warden.reply_fd, 1 << 16)
            if not chunk:
                self._lost(warden, batch, f"its warden exited ({_describe_exit(self._exit_code(warden))})")
                continue
            try:
                frames = warden.reader.feed(chunk)
            except ValueError as error:
                self._lost(warden, batch, f"its warden sent a malformed reply ({error})")
                continue
            for frame in frames:
                if not self._on_frame(warden, frame, batch):
                    break
        now = time.monotonic()
        for warden in list(self._wardens):
            if warden.task is not None and now > warden.deadline:  # (it stops a program at its wall guard itself)
                self._lost(
                    warden, batch, f"its warden stopped answering ({wall_guard(self.timeout) + REPLY_SLACK:g} s)"
                )
            elif not warden.ready and now > warden.started + STARTUP_SECONDS:
                self._discard(warden)
                raise RuntimeError(f"a sandbox warden did not start within {STARTUP_SECONDS:g} s")

    def _on_frame(self, warden: _Warden, frame: list[str], batch: "Batch | None") -> bool:
        """Handle one frame; False when the warden was discarded (the rest is not to be trusted)."""
        kind = frame[0] if frame else ""
        if kind == "pid" and len(frame) == 2 and warden.pid is None and frame[1].isdigit() and len(frame[1]) < 10:
            warden.pid = int(frame[1])
            return True
        if kind == "ready" and len(frame) == 1 + len(ReadyReply._fields) and not warden.ready:
            ready = ReadyReply(*frame[1:])
            warden.ready, warden.level, warden.isolation, warden.exposure = True, *ready
            self._check_isolation(warden)
            return True
        if kind == "fatal" and len(frame) == 2 and not warden.ready:
            self._discard(warden)
            raise RuntimeError(f"a sandbox warden failed to start:\n{frame[1]}")
        calls = warden.task is not None and batch is not None and isinstance(batch.tasks[warden.task], Call)
        if (
            kind == "verdict"
            and len(frame) == 1 + len(VerdictReply._fields)
            and warden.task is not None
            and batch is not None
            and not calls
        ):
            verdict = VerdictReply(*frame[1:])
            seconds = _seconds(verdict.seconds)
            if verdict.sequence == str(warden.sequence) and verdict.status in VERDICT_STATUSES and seconds is not None:
                index, warden.task = warden.task, None
                batch.finish(
                    index,
                    Verdict(verdict.status, verdict.detail, seconds, verdict.output, verdict.answer, verdict.returned),
                )
                return True
        if kind == "returned" and len(frame) == 1 + len(ReturnedReply._fields) and calls:
            returned = ReturnedReply(*frame[1:])
            seconds = _seconds(returned.seconds)
            value = _value(returned.value) if returned.status == "returned" else None
            if (
                returned.sequence == str(warden.sequence)
                and returned.status in CALL_STATUSES
                and seconds is not None
                and value is not _BAD
            ):
                index, warden.task = warden.task, None
                batch.finish(index, Verdict(returned.status, returned.detail, seconds, returned.output, value=value))
                return True
        self._lost(warden, batch, f"its warden broke the protocol (a {kind[:20]!r} frame of {len(frame)} fields)")
        return False

    def _check_isolation(self, warden: _Warden) -> None:
        """Warn (once per level) of a warden that isolates less than fully, or than the first one did;
        refuse it under `require_isolation`."""
        if self._reported is None:
            self._reported = warden.isolation
        if warden.level == "full" and warden.isolation == self._reported:
            return
        if self.require_isolation:
            self._discard(warden)
            raise IsolationError(f"full isolation is required, and here {warden.exposure} ({warden.isolation})")
        if warden.isolation not in self._warned:
            self._warned.add(warden.isolation)
            warnings.warn(f"sandbox isolation is degraded: {warden.exposure} ({warden.isolation})", stacklevel=6)

    def _lost(self, warden: _Warden, batch: "Batch | None", why: str) -> None:
        """A warden that died, stopped answering or misbehaved: replaced, its program run once more, then a
        JUDGE_ERROR (the sandbox's fault, not the program's)."""
        index = warden.task
        self._discard(warden)
        if not warden.ready:
            raise RuntimeError(f"a sandbox warden failed during start-up: {why}")
        if index is not None and batch is not None:
            batch.retry(index, Verdict(JUDGE_ERROR, f"the sandbox lost this program twice: {why}", 0.0))

    def _exit_code(self, warden: _Warden) -> int | None:
        try:  # the launcher exits by itself once the warden is gone, reporting how it went
            return warden.launcher.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return None

    def _discard(self, warden: _Warden) -> None:
        """Kill a warden: as PID 1 of its namespace, everything it started goes with it."""
        if warden.launcher.poll() is None and warden.pid is not None:  # a reaped launcher: its pid may be reused
            for kill in (os.kill, os.killpg):  # the process group: programs of a warden without namespaces
                try:
                    kill(warden.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:  # the launcher reaps the warden, removes its cgroup and exits
            warden.launcher.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            warden.launcher.kill()
        self._selector.unregister(warden.reply_fd)
        os.close(warden.reply_fd)
        if warden.request_fd >= 0:
            if warden.request_fd in self._selector.get_map():
                self._selector.unregister(warden.request_fd)
            os.close(warden.request_fd)
        self._wardens.remove(warden)
        warden.launcher.wait()


class Batch:
    """The programs or calls of one `verify` or `apply`: which are pending, which have verdicts; each program lost
    with its warden runs once more, then gets the verdict it was lost with (`retry`)."""

    def __init__(self, tasks: Sequence[Program | Call], on_verdict):
        self.tasks, self.on_verdict = tasks, on_verdict
        self.results: list[Verdict | None] = [None] * len(tasks)
        self.pending = deque(range(len(tasks)))
        self.retried: set[int] = set()
        self.remaining = len(tasks)

    def finish(self, index: int, verdict: Verdict) -> None:
        self.results[index] = verdict
        self.remaining -= 1
        if self.on_verdict is not None:
            self.on_verdict(index, verdict)

    def retry(self, index: int, verdict: Verdict) -> None:
        if index in self.retried:
            self.finish(index, verdict)
        else:
            self.retried.add(index)
            self.pending.appendleft(index)


_BAD = object()


def _refusal(task: Program | Call) -> str | None:
    """Why `task` gets its verdict without running: a source over SOURCE_BYTES bytes, or an answer type given that the
    judge cannot check (f's annotation, when it gives none, is read in the warden: this process never parses f)."""
    if isinstance(task, Program):
        texts = {"f": task.f, "g": task.g, "the answer type": task.ans_type or ""}
    else:
        texts = {"the program": task.source}
    for name, text in texts.items():
        if (size := _wire_size(text)) > SOURCE_BYTES:
            return f"{name} is {size:,} bytes long, over the sandbox's {SOURCE_BYTES:,}"
    if isinstance(task, Program) and task.ans_type:
        try:
            parse_answer_type(task.ans_type)
        except ValueError as error:
            return str(error)
    return None


def _wire_size(text: str) -> int:
    """Bytes of `text` in a frame (`pack`), or a lower bound past SOURCE_BYTES (without encoding a huge text)."""
    return len(text) if len(text) > SOURCE_BYTES else len(text.encode("utf-8", "backslashreplace"))


def _value(text: str):
    """A Call's result from its JSON text; _BAD for text that is not bounded ASCII JSON data."""
    if len(text) > ANSWER_BYTES or not text.isascii():
        return _BAD
    try:
        return decode_answer(text)
    except (ValueError, RecursionError):
        return _BAD


def _module_locations(modules: Sequence[str]) -> dict[str, list[str]]:
    """Where the warden imports `modules` from: their site directories ("module_roots") and the
    directories it mounts into its root ("module_dirs": each package, and the shared libraries
    its wheel bundles beside it)."""
    roots, directories = [], []
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"the sandbox can only offer installed packages, and {name!r} is not one")
        package = Path(spec.submodule_search_locations[0])
        roots.append(str(package.parent))
        directories += [str(path) for path in (package, package.with_name(f"{name}.libs")) if path.is_dir()]
    return {"module_roots": sorted(set(roots)), "module_dirs": directories}


def _seconds(text: str) -> float | None:
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    return f"exit code {code}"
