"""The process every program process is forked from."""

import fcntl
import gc
import os
import random
import resource
import signal
import socket
import sys
import time

from .isolation import CLONE_NEWPID, PR_SET_CHILD_SUBREAPER, check, drop_capabilities, fresh_tmp, libc
from .programs import CappedOutput, call_function, judge_answer, read_answer_type, run_g
from .protocol import pack, read_frame, write_all
from .seccomp import Filter, install_seccomp, program_filter, signal_filter, zygote_filter

NOBODY = 65534  # runners' uid
JUDGE_UID = 65533  # judges' and callers' uid: no runner can signal the judge of its own program
KILL_SECONDS = 2.0  # time to stop everything a program left behind before the warden gives up
WALL = 0x40000000  # waitpid's __WALL: also children whose exit signal is not SIGCHLD (raw clone(2))


class Zygote:
    """The process every program process is forked from. It is forked from the warden before the first request and
    only ever receives one-word commands: `runner`, `judge`, `caller` or `reader` (fork one; the warden gets its pid
    and its two pipe ends) and `end` (kill and reap everything it forked, give the next one a fresh /tmp, and say how
    the main one ended and the CPU time it used, its threads' included). It never sees a program, an answer or a
    request, so nothing of one program is in the memory another is forked with.

    With namespaces (`world` "root" or "user") each program process is PID 1 of a pid namespace of its own: its pid
    and its children's count nothing of other programs, and killing it ends every process it started."""

    ROLES = {b"runner": NOBODY, b"judge": JUDGE_UID, b"caller": JUDGE_UID, b"reader": JUDGE_UID}

    def __init__(self, warden):  # the warden (`main.Warden`) whose settings its children take
        self.world, self.workspace = warden.world, warden.workspace
        self.namespaced = self.world != "basic"
        self.pid_namespace = warden.pid_namespace  # an fd of the zygote's own pid namespace, to return to
        self.proc = warden.proc  # an fd of the host's /proc (with a cgroup): its children set their OOM score there
        self.address_space, self.nproc = warden.address_space, warden.nproc
        self.recursion_limit, self.output_chars = warden.recursion_limit, warden.output_chars
        self.cgroup_fds = warden.cgroup_fds
        own_filter = program_filter(warden.one_process)  # each program process's, on top of the zygote's
        self.own_filter = None if own_filter is None else Filter(own_filter)
        self.output: CappedOutput | None = None

    def serve(self, commands: socket.socket) -> None:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1)  # without namespaces, orphans of program processes come here
        for fd in self.cgroup_fds:  # every process it forks starts in the program's cgroup
            os.write(fd, b"0")
        main_filter = zygote_filter()
        if main_filter is not None:
            install_seccomp(main_filter)
        # what every program process starts with, set once here rather than in each
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        sys.setrecursionlimit(self.recursion_limit)
        sys.set_int_max_str_digits(0)  # P3 predates the limit; huge conversions meet the timeout instead
        libc.malloc_trim(0)  # fewer pages to copy at every fork
        gc.freeze()  # program processes' collections leave these objects (and their pages) alone
        gc.enable()  # (off since the warden started: no collection has run, none is counted)
        main = None
        while command := commands.recv(16):
            if command == b"end":
                ended = self._end(main)
                if self.namespaced:  # the next program process's /tmp, before its clock starts
                    fresh_tmp()
                commands.send(ended)
                main = None
            else:
                main = self._fork(command, commands)
        self._end(main)

    def _fork(self, role: bytes, commands: socket.socket) -> int:
        program_read, program_write = os.pipe()
        reply_read, reply_write = os.pipe()
        if self.namespaced:  # the next child is PID 1 of a new pid namespace (its /tmp is fresh since `end`)
            # (all of it before the fork: what the zygote writes after one, its child has to copy first)
            check(libc.setns(self.pid_namespace, CLONE_NEWPID), "setns pid namespace")
            check(libc.unshare(CLONE_NEWPID), "unshare pid namespace")
        gc.freeze()  # the count of new objects back to 0: every child starts with the same collector state
        pid = os.fork()
        if pid == 0:
            try:
                self._isolate([program_read, reply_write], self.ROLES[role])
                mains = {
                    b"runner": self._runner_main,
                    b"judge": self._judge_main,
                    b"caller": self._caller_main,
                    b"reader": self._reader_main,
                }
                mains[role]()
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
        """Kill every child until none is left: the main one (with namespaces, its pid namespace's every process
        goes with it, before it can be reaped), and without namespaces the orphans of its descendants (this is
        their subreaper). b"<main's wait status> <1 if all are gone, else 0> <main's CPU seconds>"."""
        status, cpu, deadline = -1, 0.0, time.monotonic() + KILL_SECONDS
        if main is not None:  # the usual case: the main one alone, reaped without a look at /proc
            try:
                os.kill(main, signal.SIGKILL)
                _, status, usage = os.wait4(main, WALL)
                cpu = usage.ru_utime + usage.ru_stime
                os.waitpid(-1, os.WNOHANG | WALL)  # raises when no child at all is left
            except ChildProcessError:
                return f"{status} 1 {cpu!r}".encode()
        while children := _children():
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in children:
                try:
                    _, wait_status, usage = os.wait4(pid, WALL)
                except ChildProcessError:
                    continue
                if pid == main:
                    status, cpu = wait_status, usage.ru_utime + usage.ru_stime
            if time.monotonic() > deadline:
                return f"{status} 0 {cpu!r}".encode()
        return f"{status} 1 {cpu!r}".encode()

    def _isolate(self, keep: list[int], uid: int) -> None:
        """In a forked child, still privileged: its own process group and working directory, `keep` as fds 3, 4,
        ..., limits, then its uid (as root), no capabilities (in a user namespace), and last the seccomp filters;
        then captured output."""
        os.setpgid(0, 0)  # a signal to "my process group" reaches only this program
        if self.proc is not None:  # the cgroup's OOM killer picks a program process before the zygote
            score = os.open("self/oom_score_adj", os.O_WRONLY, dir_fd=self.proc)
            os.write(score, b"1000")
            os.close(score)
        os.chdir("/tmp" if self.namespaced else self.workspace)
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1000) for fd in keep]
        for number, fd in enumerate(moved, start=3):
            os.dup2(fd, number)
        os.closerange(3 + len(keep), 1 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (self.address_space,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20,) * 2)
        if self.nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc,) * 2)
        if self.world == "root":
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        elif self.world == "user":
            drop_capabilities()
        if not self.namespaced:  # the warden's uid: it must not be able to signal the supervisor, warden or zygote
            install_seccomp(signal_filter(os.getpid()))
        if self.own_filter is not None:  # last: it refuses prctl
            self.own_filter.install()
        random.seed(0)  # after the fork: `random` reseeds itself from the system in every forked child
        self.output = sys.stdout = sys.stderr = CappedOutput(self.output_chars)

    def _runner_main(self) -> None:
        g, code, answer_type = _request()
        write_all(4, pack(*run_g(g, code, answer_type), self.output.value()))

    def _judge_main(self) -> None:
        f, code, answer_type, answer, shared = _request()
        write_all(4, pack(*judge_answer(f, code, answer_type, answer, shared), self.output.value()))

    def _reader_main(self) -> None:
        f, _ = _request()
        write_all(4, pack(*read_answer_type(f), self.output.value()))

    def _caller_main(self) -> None:
        source, code, function, text = _request()
        write_all(4, pack(*call_function(source, code, function, text), self.output.value()))


def _request() -> list:
    """A program process's one request, from the warden: its source, the source's marshalled code or b"", then
    text fields."""
    source, code, *rest = read_frame(3, 1 << 31, decode=False)
    return [source.decode(), code, *(field.decode() for field in rest)]


def _children() -> list[int]:
    """This single-threaded process's children, zombies included."""
    with open(f"/proc/self/task/{os.getpid()}/children") as children:
        return [int(pid) for pid in children.read().split()]
