"""Judging on a Ray cluster (`sandbox.backend: ray`): the local sandbox's wardens, each inside a Ray actor.

    with RaySandbox(workers=16, timeout=1.0, address="auto") as sandbox:
        verdicts = sandbox.verify([Program(f=..., g=..., ans_type="List[int]")])

Each actor takes one CPU of whatever node Ray places it on and owns a local `Sandbox(workers=1)` with this
sandbox's settings: a program is judged exactly as on this machine, in a warden on that node. A batch is split into
chunks that the actors take as they finish the last, so verdicts come back in input order. An actor that dies (its
node lost, killed), raises or overruns its chunks' time is killed and replaced, and its chunks' programs run once
more on another actor; a program lost twice gets a JUDGE_ERROR verdict, the judge's fault, never the program's.
Ray is imported here only, when a RaySandbox is made: the extra `ray` installs it.
"""

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from codeplay_lightning.execution.api import (
    JUDGE_ERROR,
    Call,
    IsolationError,
    Program,
    Verdict,
    checked_timeout,
    checked_workers,
)
from codeplay_lightning.execution.sandbox import LEVELS, REPLY_SLACK, STARTUP_SECONDS, Batch, Sandbox
from codeplay_lightning.execution.warden.answers import ANSWER_BYTES
from codeplay_lightning.execution.warden.protocol import wall_guard

INSTALL = "pip install 'codeplay_lightning[ray]'"
CHUNK_PROGRAMS = 32  # at most per call to an actor: a Ray call costs about a millisecond, a verdict a few
CHUNKS_PER_ACTOR = 4  # a batch is cut into at least this many chunks per actor, so that the actors finish together
CHUNKS_IN_FLIGHT = 2  # per actor: its next chunk waits in its queue while it judges one


def import_ray():
    """The `ray` module, or an ImportError that says how to install it, in one line."""
    try:
        import ray
    except ImportError:
        raise ImportError(f"the Ray judging backend needs Ray: {INSTALL}") from None
    return ray


class _Judge:
    """A Ray actor: one warden, in a local Sandbox of one worker on the actor's node."""

    def __init__(self, settings: dict):
        self.sandbox = Sandbox(workers=1, **settings)

    def start(self) -> tuple[str, str, str]:
        """(level, isolation, "") once its warden is up; ("", "", why) where `require_isolation` refuses it."""
        try:
            return self.sandbox.level, self.sandbox.isolation, ""
        except IsolationError as error:
            return "", "", str(error)

    def verify(self, programs: list[Program]) -> list[Verdict]:
        return self.sandbox.verify(programs)

    def apply(self, calls: list[Call]) -> list[Verdict]:
        return self.sandbox.apply(calls)

    def close(self) -> None:
        self.sandbox.close()


@dataclass(eq=False)
class _Actor:
    handle: object
    started: float
    starting: object | None  # the ref of its start() until it answers
    level: str = ""
    isolation: str = ""
    chunks: list["_Chunk"] = field(default_factory=list)  # in flight, oldest first


@dataclass(eq=False)
class _Chunk:
    actor: _Actor
    indices: list[int]
    deadline: float  # past it, the actor is presumed stuck: killed, and the chunk lost


class RaySandbox:
    """`workers` Ray actors, one CPU each, judging as `Sandbox` does, on the cluster `ray.init(address)` reaches
    (used as it is when this process has joined one already). Use as a context manager, or call `close()`.

    Every actor reports how well its warden isolates programs; one below full gets a one-line warning, or with
    `require_isolation` an IsolationError before any program runs on it."""

    def __init__(
        self,
        workers: int = 2,
        timeout: float = 1.0,
        memory_mb: int = 1024,
        output_chars: int = 4096,
        recursion_limit: int = 10_000,
        modules: Sequence[str] = (),
        require_isolation: bool = False,
        address: str = "auto",
    ):
        self._ray = ray = import_ray()
        self.size, self.timeout = checked_workers(workers), checked_timeout(timeout)
        self.require_isolation = require_isolation
        self._settings = {
            "timeout": self.timeout,
            "memory_mb": memory_mb,
            "output_chars": output_chars,
            "recursion_limit": recursion_limit,
            "modules": tuple(modules),
            "require_isolation": require_isolation,
        }
        # the longest a warden may take on a program: its wall guard, twice (once more on a fresh warden)
        self._program_seconds = 2 * (wall_guard(self.timeout) + REPLY_SLACK)
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self._judge = ray.remote(num_cpus=1)(_Judge)
        self._actors: list[_Actor] = []
        self._unserved_since: float | None = None  # since when no actor has been up to judge
        self._warned: set[str] = set()
        self.busy_seconds = 0.0  # wall time spent in verify(), for the share of an iteration it takes
        self._fill()

    def __enter__(self) -> "RaySandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def isolation(self) -> str:
        """How strongly programs are isolated, in words (docs/sandbox.md), once every actor is up: the least any
        actor's warden offers."""
        self._fill()
        self._unserved_since = None
        deadline = time.monotonic() + 2 * STARTUP_SECONDS  # (a replacement for one that died starting gets its own)
        while any(actor.starting is not None for actor in self._actors):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray judges did not all start within {2 * STARTUP_SECONDS:g} s")
            self._pump(None)
            self._fill()
        return min(self._actors, key=lambda actor: LEVELS.index(actor.level)).isolation

    @property
    def level(self) -> str:
        """The isolation's level, full, partial or basic (`Sandbox.level`): the least any actor offers."""
        _ = self.isolation
        return min((actor.level for actor in self._actors), key=LEVELS.index)

    def verify(
        self, programs: Sequence[Program], on_verdict: Callable[[int, Verdict], None] | None = None
    ) -> list[Verdict]:
        """One verdict per program, in order. `on_verdict(index, verdict)` is called as each lands."""
        return self._execute("verify", programs, on_verdict)

    def apply(self, calls: Sequence[Call], on_verdict: Callable[[int, Verdict], None] | None = None) -> list[Verdict]:
        """One verdict per call, in order, as `Sandbox.apply` gives it."""
        for call in calls:
            if len(json.dumps(call.input)) > ANSWER_BYTES:
                raise ValueError(f"a call's input is over {ANSWER_BYTES} bytes as JSON")
        return self._execute("apply", calls, on_verdict)

    def close(self) -> None:
        """Each actor closes its sandbox (within a bounded wait), then is killed."""
        ray = self._ray
        closing = [actor.handle.close.remote() for actor in self._actors]
        ray.wait(closing, num_returns=len(closing), timeout=10.0)
        for actor in list(self._actors):
            self._kill(actor)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    # ------------------------------------------------------------ batches

    def _execute(self, method: str, tasks: Sequence[Program | Call], on_verdict) -> list[Verdict]:
        started = time.perf_counter()
        batch = _Batch(method, tasks, on_verdict)
        chunk_size = max(1, min(CHUNK_PROGRAMS, math.ceil(len(tasks) / (self.size * CHUNKS_PER_ACTOR))))
        self._unserved_since = None
        try:
            while batch.remaining:
                self._fill()
                for actor in self._actors:
                    while actor.starting is None and len(actor.chunks) < CHUNKS_IN_FLIGHT and batch.pending:
                        self._dispatch(actor, batch, chunk_size)
                self._pump(batch)
        except BaseException:
            for actor in [actor for actor in self._actors if actor.chunks]:  # their chunks die with this call
                self._kill(actor)
            raise
        self.busy_seconds += time.perf_counter() - started
        return batch.results  # type: ignore[return-value]

    def _dispatch(self, actor: _Actor, batch: "_Batch", chunk_size: int) -> None:
        indices = [batch.pending.popleft() for _ in range(min(chunk_size, len(batch.pending)))]
        ref = getattr(actor.handle, batch.method).remote([batch.tasks[index] for index in indices])
        queued_until = max([chunk.deadline for chunk in actor.chunks], default=time.monotonic())
        # it may wait for a warden to start too
        chunk = _Chunk(actor, indices, queued_until + STARTUP_SECONDS + len(indices) * self._program_seconds)
        actor.chunks.append(chunk)
        batch.in_flight[ref] = chunk

    def _pump(self, batch: "_Batch | None") -> None:
        """Wait for one start or chunk (until the nearest deadline, a second at most); handle it and any overrun."""
        ray = self._ray
        starts = {actor.starting: actor for actor in self._actors if actor.starting is not None}
        chunks = batch.in_flight if batch is not None else {}
        deadlines = [chunk.deadline for chunk in chunks.values()]
        deadlines += [actor.started + STARTUP_SECONDS for actor in starts.values()]
        wait = min([time.monotonic() + 1.0, *deadlines]) - time.monotonic()
        ready, _ = ray.wait([*starts, *chunks], num_returns=1, timeout=max(0.0, wait))
        for ref in ready:
            if ref in starts:
                self._on_start(starts[ref], ref)
            else:
                self._on_chunk(chunks.pop(ref), ref, batch)
        now = time.monotonic()
        for chunk in [chunk for chunk in chunks.values() if now > chunk.deadline]:
            if chunk.actor in self._actors:
                self._lose(chunk.actor, batch, "its Ray judge overran the time its programs may take")
        for actor in [actor for actor in starts.values() if now > actor.started + STARTUP_SECONDS]:
            if actor in self._actors:
                self._kill(actor)
        ready_actors = [actor for actor in self._actors if actor.starting is None]
        if ready_actors:
            self._unserved_since = None
        elif self._unserved_since is None:
            self._unserved_since = now
        elif now > self._unserved_since + STARTUP_SECONDS:
            raise RuntimeError(
                f"no Ray judge has been up for {STARTUP_SECONDS:g} s: does the cluster have {self.size} free CPU(s)?"
            )

    def _on_start(self, actor: _Actor, ref) -> None:
        ray = self._ray
        try:
            actor.level, actor.isolation, refusal = ray.get(ref, timeout=STARTUP_SECONDS)
        except ray.exceptions.RayError as error:
            self._kill(actor)
            if isinstance(error, ray.exceptions.RayTaskError) or getattr(error, "actor_init_failed", False):
                raise RuntimeError(f"a Ray judge failed to start: {_summary(error)}") from None
            return  # it died before it answered: replaced
        actor.starting = None
        if refusal:
            self._kill(actor)
            raise IsolationError(refusal)
        if actor.level != "full" and actor.isolation not in self._warned:
            self._warned.add(actor.isolation)
            warnings.warn(f"sandbox isolation is degraded on a Ray judge: {actor.isolation}", stacklevel=4)

    def _on_chunk(self, chunk: _Chunk, ref, batch: "_Batch") -> None:
        ray = self._ray
        if chunk.actor not in self._actors:  # lost with its actor already
            return
        try:
            verdicts = ray.get(ref, timeout=STARTUP_SECONDS)
        except ray.exceptions.RayError as error:
            self._lose(chunk.actor, batch, f"its Ray judge failed ({_summary(error)})")
            return
        chunk.actor.chunks.remove(chunk)
        for index, verdict in zip(chunk.indices, verdicts):
            batch.finish(index, verdict)

    def _lose(self, actor: _Actor, batch: "_Batch", why: str) -> None:
        """An actor that died, raised or overran: killed, and each program of its chunks run once more elsewhere,
        then a JUDGE_ERROR."""
        self._kill(actor)
        for chunk in actor.chunks:
            for index in chunk.indices:
                batch.retry(index, Verdict(JUDGE_ERROR, f"the sandbox lost this program twice: {why}", 0.0))
        for ref in [ref for ref, chunk in batch.in_flight.items() if chunk.actor is actor]:
            del batch.in_flight[ref]

    # ------------------------------------------------------------ actors

    def _fill(self) -> None:
        while len(self._actors) < self.size:
            handle = self._judge.remote(self._settings)
            self._actors.append(_Actor(handle, time.monotonic(), handle.start.remote()))

    def _kill(self, actor: _Actor) -> None:
        self._ray.kill(actor.handle, no_restart=True)
        self._actors.remove(actor)


class _Batch(Batch):
    """A local sandbox's batch, with the Ray calls in flight and the method the actors are called with."""

    def __init__(self, method: str, tasks: Sequence[Program | Call], on_verdict):
        super().__init__(tasks, on_verdict)
        self.method = method
        self.in_flight: dict[object, _Chunk] = {}  # a chunk's ref -> the chunk


def _summary(error: BaseException) -> str:
    """The last line of a Ray error (the exception, below its traceback), shortened."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(error).__name__
