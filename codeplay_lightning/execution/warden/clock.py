"""A program's clock, and the waits on its processes that the clock bounds: the warden reads and writes a program
process's pipes without blocking, and stops waiting when the clock runs out or the supervisor goes away."""

import os
import select
import time
from collections.abc import Callable
from contextlib import contextmanager

from .protocol import SLEEPING_SHARE, FrameReader, sleeper_guard, wall_guard

CPU_LOOK_SECONDS = 0.02  # how often a running program's CPU time is read


class SupervisorGone(Exception):
    """The supervisor closed the request pipe: the warden exits, and its namespace with it."""


class Deadline(Exception):
    pass


class Clock:
    """A program's time. Where the CPU time of a program's processes can be read (`cpu`: a counter of seconds that
    only grows: a cgroup's, or a warden's single program process's), the CPU seconds it used (a program running
    beside a busy one takes as long by this clock as alone), under wall-clock guards: `sleeper_guard` for one that
    mostly sleeps (it uses no CPU), `wall_guard` for any; elsewhere, the wall's."""

    def __init__(self, limit: float, cpu: Callable[[], float] | None):
        self.limit, self.cpu = limit, cpu
        self.started = time.monotonic()
        self.cpu_started = cpu() if cpu is not None else 0.0
        self.guard = self.started + (wall_guard(limit) if cpu is not None else limit)

    def seconds(self) -> float:
        if self.cpu is None:
            return time.monotonic() - self.started
        return self.cpu() - self.cpu_started

    def expired(self) -> bool:
        return time.monotonic() > self.guard or self.seconds() > self.limit or self.sleeping()

    def sleeping(self) -> bool:
        """Past `sleeper_guard`, having used under SLEEPING_SHARE of a core since it started."""
        if self.cpu is None:
            return False
        elapsed = time.monotonic() - self.started
        return elapsed > sleeper_guard(self.limit) and self.seconds() < SLEEPING_SHARE * elapsed

    def until_next_look(self) -> float:
        remaining = self.guard - time.monotonic()
        return min(remaining, CPU_LOOK_SECONDS) if self.cpu is not None else remaining

    @contextmanager
    def paused(self):
        """Time that is no program's (its processes being killed, its /tmp freed) left out of its clock."""
        wall, cpu = time.monotonic(), self.cpu() if self.cpu is not None else 0.0
        try:
            yield
        finally:
            away = time.monotonic() - wall
            self.started, self.guard = self.started + away, self.guard + away
            if self.cpu is not None:
                self.cpu_started += self.cpu() - cpu

    def overrun(self, name: str) -> str:
        """Why `name` was stopped."""
        if self.cpu is not None and (time.monotonic() > self.guard or self.sleeping()):
            elapsed = time.monotonic() - self.started
            return (
                f"{name} still ran after {elapsed:.1f} s of wall time, {self.seconds():.2f} s of it on a core (the "
                f"limit: {self.limit:g} s of CPU)"
            )
        kind = " of CPU time" if self.cpu is not None else ""
        return f"{name} ran past the {self.limit:g} s limit{kind}"


def wait_for(fd: int, events: int, clock: Clock, supervisor_fd: int) -> None:
    """Until `fd` is ready for `events`: Deadline once `clock` has expired, SupervisorGone as soon as the
    supervisor's request pipe hangs up (the warden then stops at once)."""
    poller = select.poll()
    poller.register(fd, events)
    poller.register(supervisor_fd, 0)  # only hang-ups are reported for events=0
    while True:
        if clock.expired():
            raise Deadline
        ready = poller.poll(max(clock.until_next_look(), 0) * 1000)
        if any(ready_fd == supervisor_fd for ready_fd, _ in ready):
            raise SupervisorGone
        if ready:
            return


class Channel:
    """Non-blocking reads and writes to one child, each bounded by its program's clock. While waiting, the
    supervisor's request pipe is watched too: if the supervisor dies, the warden stops at once."""

    def __init__(self, read_fd: int, write_fd: int, limit: int, supervisor_fd: int):
        self.read_fd, self.write_fd, self.supervisor_fd = read_fd, write_fd, supervisor_fd
        self.reader = FrameReader(limit)
        for fd in (read_fd, write_fd):
            os.set_blocking(fd, False)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            os.close(fd)

    def send(self, data: bytes, clock: Clock) -> bool:
        """False when the child closed its end; Deadline when it stopped reading."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.write_fd, view) :]
            except BlockingIOError:
                wait_for(self.write_fd, select.POLLOUT, clock, self.supervisor_fd)
            except BrokenPipeError:
                return False
        return True

    def receive(self, clock: Clock) -> list[str] | None:
        """The next frame; None at end of file; ValueError for a malformed or oversized frame."""
        while True:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                wait_for(self.read_fd, select.POLLIN, clock, self.supervisor_fd)
                continue
            if not chunk:
                return None
            frames = self.reader.feed(chunk)
            if frames:
                return frames[0]
