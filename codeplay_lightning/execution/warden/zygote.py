"""The process every program process is forked from."""

import fcntl
import gc
import marshal
import os
import random
import resource
import signal
import socket
import sys
import time

from .isolation import PR_SET_CHILD_SUBREAPER, _libc
from .programs import CappedOutput, call_function, judge_answer, run_g
from .protocol import pack, read_frame, write_all
from .seccomp import install_seccomp, seccomp_filter

NOBODY = 65534  # runners' uid
JUDGE_UID = 65533  # judges' and callers' uid: no runner can signal the judge of its own program
KILL_SECONDS = 2.0  # time to stop everything a program left behind before the warden gives up
WALL = 0x40000000  # waitpid's __WALL: also children whose exit signal is not SIGCHLD (raw clone(2))


class Zygote:
    """The process every program process is forked from. It is forked from the warden before the
    first request and only ever receives one-word commands: `runner`, `judge` or `caller` (fork
    one; the warden gets its pid and its two pipe ends) and `end` (kill and reap everything it
    forked, and say how the main one ended). It never sees a program, an answer or a request,
    so nothing of one program is in the memory another is forked with."""

    ROLES = {b"runner": NOBODY, b"judge": JUDGE_UID, b"caller": JUDGE_UID}

    def __init__(self, warden):  # the warden (`main.Warden`) whose settings its children take
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
