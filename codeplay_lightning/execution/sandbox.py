"""The supervisor side of the sandbox: a pool of long-lived workers (see `worker.py`) fed over pipes.

    with Sandbox(workers=2, timeout=1.0) as sandbox:
        verdicts = sandbox.verify([Program(f=..., g=..., ans_type="List[int]")])

The supervisor enforces what a program cannot escape from inside the worker: the wall-clock
deadline (SIGKILL, which no program can ignore), crashes and exits (detected as the worker's
death), and protocol integrity (every reply must answer the request id it was sent). A worker
that dies, overruns, misbehaves or asks to be recycled is replaced; its queued work is not lost.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from codeplay_lightning.execution.worker import HEADER, write_message

STATUSES = ("pass", "fail", "error", "timeout", "memory", "syntax")
WORKER_SCRIPT = Path(__file__).with_name("worker.py")
STARTUP_SECONDS = 60.0
DEADLINE_SLACK = 0.05  # seconds of pipe latency allowed on top of the program's own timeout


@dataclass(frozen=True)
class Program:
    """One candidate solution: `f(g()) is True` with an answer of type `ans_type` is a pass.
    `ans_type=None` means f's first annotation (no type check when f has none)."""

    f: str
    g: str
    ans_type: str | None = None
    name: str = ""


@dataclass(frozen=True)
class Verdict:
    status: str  # one of STATUSES
    detail: str  # why, for anything but a pass: exception and short traceback, f's return value, ...
    seconds: float
    output: str = ""  # what the program printed, capped

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass
class _Worker:
    process: subprocess.Popen  # the launcher; the worker itself is its only child
    request_fd: int
    reply_fd: int
    started: float
    pid: int | None = None  # the worker's pid, as the supervisor sees it
    ready: bool = False
    isolation: str = ""
    buffer: bytearray | None = None
    task: int | None = None  # index of the program it is running
    request_id: str = ""
    dispatched: float = 0.0
    deadline: float = 0.0
    recycle: bool = False

    def __post_init__(self):
        self.buffer = bytearray()


class Sandbox:
    """A pool of sandbox workers. Use as a context manager, or call `close()`."""

    def __init__(self, workers: int = 2, timeout: float = 1.0, memory_mb: int = 1024,
                 output_chars: int = 4096, recursion_limit: int = 10_000):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if memory_mb < 64:
            raise ValueError(f"memory_mb must be at least 64, got {memory_mb}")
        self.size, self.timeout = workers, timeout
        self._settings = {"memory_mb": memory_mb, "output_chars": output_chars,
                          "recursion_limit": recursion_limit, "supervisor_pid": os.getpid()}
        self._workers: list[_Worker] = []
        self._selector = selectors.DefaultSelector()
        self.workers_started = 0
        self.busy_seconds = 0.0  # wall time spent in verify(), for the share of an iteration it takes
        self._warned = False

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def isolation(self) -> str:
        """How strongly programs are isolated here (namespaces and uid drop need root)."""
        self._fill_pool()
        while not all(worker.ready for worker in self._workers):
            self._pump(deque(), [], None, time.monotonic() + 0.1)
        return self._workers[0].isolation

    def verify(self, programs: Sequence[Program],
               on_verdict: Callable[[int, Verdict], None] | None = None) -> list[Verdict]:
        """One verdict per program, in order. `on_verdict(index, verdict)` is called as each lands."""
        started = time.perf_counter()
        results: list[Verdict | None] = [None] * len(programs)
        pending = deque(range(len(programs)))
        retried: set[int] = set()

        def finish(index: int, verdict: Verdict) -> None:
            results[index] = verdict
            if on_verdict is not None:
                on_verdict(index, verdict)

        remaining = len(programs)
        try:
            while remaining:
                self._fill_pool()
                for worker in self._workers:
                    if worker.ready and worker.task is None and not worker.recycle and pending:
                        self._dispatch(worker, pending.popleft(), programs)
                deadlines = [w.deadline for w in self._workers if w.task is not None]
                wake = min(deadlines, default=time.monotonic() + 1.0)
                remaining -= self._pump(pending, programs, finish, wake, retried)
        except BaseException:
            for worker in [w for w in self._workers if w.task is not None]:  # their tasks die with this call
                self._discard(worker)
            raise
        self.busy_seconds += time.perf_counter() - started
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for worker in list(self._workers):
            self._discard(worker)

    # ------------------------------------------------------------ pool mechanics

    def _fill_pool(self) -> None:
        for worker in [w for w in self._workers if w.recycle and w.task is None]:
            self._discard(worker)
        while len(self._workers) < self.size:
            self._workers.append(self._spawn())

    def _spawn(self) -> _Worker:
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        settings = dict(self._settings, request_fd=request_read, reply_fd=reply_write)
        process = subprocess.Popen(
            [sys.executable, "-s", "-S", str(WORKER_SCRIPT), json.dumps(settings)],
            pass_fds=(request_read, reply_write), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"},
        )
        os.close(request_read)
        os.close(reply_write)
        worker = _Worker(process, request_write, reply_read, time.monotonic())
        self._selector.register(reply_read, selectors.EVENT_READ, worker)
        self.workers_started += 1
        return worker

    def _dispatch(self, worker: _Worker, index: int, programs: Sequence[Program]) -> None:
        program = programs[index]
        worker.task, worker.request_id = index, secrets.token_hex(8)
        worker.dispatched = time.monotonic()
        worker.deadline = worker.dispatched + self.timeout + DEADLINE_SLACK
        try:
            write_message(worker.request_fd, {"id": worker.request_id, "f": program.f, "g": program.g,
                                              "ans_type": program.ans_type})
        except OSError:
            pass  # the worker died; its reply pipe reports EOF and the program is handled there

    def _pump(self, pending: deque, programs, finish, wake: float, retried: set[int] = frozenset()) -> int:
        """Wait for replies until `wake`; handle them and any overrun. Returns verdicts produced."""
        finished = 0
        for key, _ in self._selector.select(max(0.0, wake - time.monotonic())):
            worker: _Worker = key.data
            chunk = os.read(worker.reply_fd, 1 << 16)
            if not chunk:
                finished += self._on_death(worker, finish)
                continue
            worker.buffer += chunk
            for message in self._messages(worker):
                finished += self._on_message(worker, message, pending, finish, retried)
                if worker not in self._workers:  # discarded: the rest of its buffer is not to be trusted
                    break
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.task is not None and now > worker.deadline:
                index = worker.task
                self._discard(worker)
                finish(index, Verdict("timeout", f"no verdict within {self.timeout:g} s; worker killed",
                                      self.timeout))
                finished += 1
            elif not worker.ready and now > worker.started + STARTUP_SECONDS:
                self._discard(worker)
                raise RuntimeError(f"a sandbox worker did not start within {STARTUP_SECONDS:g} s")
        return finished

    @staticmethod
    def _messages(worker: _Worker):
        buffer = worker.buffer
        while len(buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer)
            if len(buffer) < HEADER.size + size:
                return
            payload = bytes(buffer[HEADER.size:HEADER.size + size])
            del buffer[:HEADER.size + size]
            try:
                yield json.loads(payload)
            except ValueError:
                yield {"garbled": True}

    def _on_message(self, worker: _Worker, message, pending: deque, finish, retried) -> int:
        if not isinstance(message, dict):
            message = {"garbled": True}
        if "pid" in message and worker.pid is None:
            worker.pid = message["pid"]
            return 0
        if "ready" in message and not worker.ready:
            worker.ready, worker.isolation = True, str(message.get("isolation", ""))
            if not worker.isolation.startswith("namespaces") and not self._warned:
                warnings.warn(f"sandbox isolation is degraded: {worker.isolation}", stacklevel=4)
                self._warned = True
            return 0
        if "fatal" in message and not worker.ready:
            self._discard(worker)
            raise RuntimeError(f"a sandbox worker failed to start:\n{message['fatal']}")
        index = worker.task
        if index is not None and message.get("id") == worker.request_id and message.get("status") in STATUSES:
            worker.task = None
            worker.recycle = bool(message.get("recycle"))
            seconds = float(message.get("seconds", 0.0))
            status = "timeout" if seconds > self.timeout else message["status"]
            finish(index, Verdict(status, str(message.get("detail", "")), seconds, str(message.get("output", ""))))
            return 1
        # Anything else was forged by a program writing to the reply pipe: the worker cannot be
        # trusted. Its current program gets one more try on a fresh worker.
        self._discard(worker)
        if index is None:
            return 0
        if index in retried:
            finish(index, Verdict("error", "the program wrote to the sandbox's reply channel", 0.0))
            return 1
        retried.add(index)
        pending.appendleft(index)
        return 0

    def _on_death(self, worker: _Worker, finish) -> int:
        index, seconds = worker.task, time.monotonic() - worker.dispatched
        try:  # the launcher exits by itself once the worker is gone, reporting how it went
            code = worker.process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            code = None
        self._discard(worker)
        if not worker.ready:
            raise RuntimeError(f"a sandbox worker exited during start-up ({_describe_exit(code)})")
        if index is None:
            return 0
        finish(index, Verdict("error", f"the program ended the sandbox worker: {_describe_exit(code)}", seconds))
        return 1

    def _discard(self, worker: _Worker) -> None:
        """Kill a worker and everything it started."""
        if worker.process.poll() is None and worker.pid is not None:  # a reaped launcher: its pid may be reused
            try:
                os.kill(worker.pid, signal.SIGKILL)  # PID 1 of its namespace: the namespace goes with it
            except ProcessLookupError:
                pass
            try:  # the launcher reaps the worker and exits; killed first, it would leave a zombie to init
                worker.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        try:  # without namespaces, what the programs started lives on in the launcher's process group
            os.killpg(worker.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._selector.unregister(worker.reply_fd)
        os.close(worker.reply_fd)
        os.close(worker.request_fd)
        self._workers.remove(worker)
        worker.process.wait()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    return f"exit code {code}"
