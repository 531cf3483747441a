"""The warden: its start (the world its programs run in, their cgroup, the zygote) and its request loop.

A warden's world is one of three, the best the machine allows:
- "root": as root with a cgroup of its own, the warden is PID 1 of new pid, net, mount and ipc namespaces with a
  root of its own, and the cgroup bounds each program's memory and processes and counts its CPU time, the program's
  clock;
- "user": without root (or a cgroup), the same namespaces inside a user namespace of its own, with every capability
  dropped in program processes, and each program one process (threads only: `program_filter`), so that its
  process's limits are the program's: its address space bounds its memory and its CPU time is the clock;
- "basic": neither (a container that forbids namespaces): rlimits, the seccomp filters, a directory of its own.
"""

import gc
import json
import marshal
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable

from .answers import ANSWER_BYTES, answer_type_of
from .clock import Channel, Clock, Deadline, SupervisorGone, wait_for
from .isolation import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    PR_SET_DUMPABLE,
    ROOT,
    Cgroup,
    Removal,
    build_root,
    cpu_seconds,
    libc,
    oom_kills,
    tasks_of,
)
from .programs import ProgramError, compile_source
from .protocol import (
    DETAIL_CHARS,
    ROLE_STATUSES,
    ApplyRequest,
    ReadyReply,
    ReturnedReply,
    RunRequest,
    VerdictReply,
    frame_limit,
    pack,
    read_frame,
    sleeper_guard,
    wall_guard,
    write_all,
)
from .seccomp import allowed, zygote_filter
from .zygote import JUDGE_UID, KILL_SECONDS, NOBODY, Zygote

PROGRAM_PROCESSES = 32  # processes one program may have at once (itself included); in the user world, threads
CPUCLOCK_SCHED = 2  # a process's CPU clock id is (~pid << 3) | CPUCLOCK_SCHED (clock_getcpuclockid(3))
# in a user namespace, RLIMIT_NPROC counts the tasks of the namespace's own uid (Linux 5.14 and later): these three
# (the launcher, the warden, the zygote) and the program's, whatever else runs on the machine
WARDEN_TASKS = 3
ADDRESS_SPACE_STEP = 64 << 20
TRASH_SLICE = 0.05  # seconds of deleting what programs left, between requests, without namespaces
# sources up to this many characters are compiled by the warden: at most ~50 ms and a few MiB whatever they hold
# (measured: 16 KiB of f-string fields, the worst case found), and f compiles once for all of a puzzle's attempts;
# longer ones are compiled in the program's own process, under its limits and clock
WARDEN_COMPILES = 1 << 14
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


class Warden:
    def __init__(self, settings: dict, world: str, cgroup: Cgroup | None, workspace: str | None):
        self.request_fd, self.reply_fd = settings["request_fd"], settings["reply_fd"]
        self.timeout, self.output_chars = settings["timeout"], settings["output_chars"]
        self.memory_bytes, self.recursion_limit = settings["memory_mb"] << 20, settings["recursion_limit"]
        self.world, self.cgroup = world, cgroup
        self.namespaced = world != "basic"
        self.seccomp = zygote_filter() is not None
        self.one_process = world == "user" and self.seccomp  # (without the filter, forks would escape the limits)
        self.program_uid = NOBODY if world == "root" else os.getuid()
        if cgroup:
            self.nproc = None  # (the cgroup counts a program's processes)
        elif world == "user":
            self.nproc = WARDEN_TASKS + PROGRAM_PROCESSES
        else:  # the uid's tasks machine-wide
            self.nproc = tasks_of(self.program_uid) + PROGRAM_PROCESSES
        self.cgroup_fds, self.oom_fd, self.cpu_fd = cgroup.open_files() if cgroup else ([], None, None)
        self.oom_count = oom_kills(self.oom_fd) if self.oom_fd is not None else 0
        # the CPU seconds that programs have used so far, where they can be read: the clock of a verdict
        if self.cpu_fd is not None:
            self.cpu: Callable[[], float] | None = lambda: cpu_seconds(self.cpu_fd)
        else:
            self.cpu = self._program_cpu if self.one_process else None
        self.live: int | None = None  # the program process now running
        self.ended_cpu = 0.0  # the CPU seconds of those that ended, as the zygote reaped them
        # without namespaces, programs work in a directory of the host's, replaced when one left something in it
        self.workspace = None if self.namespaced else os.path.join(workspace, "work")
        self.trash: list[Removal] = []  # without namespaces: directories programs left, deleted between requests
        self.trashed = 0
        self.compiled: tuple[str, bytes | ProgramError] | None = None  # the last source compiled here, and its code
        self.annotation: tuple[str, tuple[str, str, str]] | None = None  # the last f whose annotation was read here
        self.address_space = 0
        self.pid_namespace = -1
        self.proc: int | None = None
        self.zygote_pid, self.zygote = 0, None

    def start(self, settings: dict) -> None:
        """Import what programs start with, build the root, and fork the zygote: before any request."""
        stdlib = os.path.dirname(os.__file__)
        sys.path[:] = [path for path in sys.path if path.startswith(stdlib)] + settings["module_roots"]
        for name in PRELOADED + tuple(settings["modules"]):
            __import__(name)
        with open("/proc/self/statm") as statm:  # what a program process starts with, and its limit above that
            start = int(statm.read().split()[0]) * resource.getpagesize()
        # in whole 64 MiB: the same limit in every warden, whatever its heap holds (a warden that compiled its own
        # modules, with no bytecode cache yet, starts larger)
        self.address_space = -(-start // ADDRESS_SPACE_STEP) * ADDRESS_SPACE_STEP + self.memory_bytes
        if self.namespaced:  # the extra modules' directories only, at their own paths: nothing else of site-packages
            self.pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY)  # the zygote returns to it after forks
            if self.cgroup:  # (program processes close it before anything of theirs runs)
                self.proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY)
            os.chroot(built_apart(stdlib, settings["module_dirs"], as_root=self.world == "root"))
            os.chdir("/")
        else:
            os.setsid()
            os.mkdir(self.workspace, 0o700)
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
        gc.enable()
        # one program process forked and ended before any request: what Python and ctypes make on first use in
        # the zygote then exists before the first program's fork, which starts from the state of every later one
        self._fork(b"runner")[1].close()
        self._end()

    def isolation(self) -> ReadyReply:
        """How it isolates programs, and the level: "full" takes namespaces, the seccomp filter and a program's
        memory, processes and CPU time bounded as one (the root world's cgroup, or the user world's one process per
        program); the exposure says, in one line, what a program can do under anything less."""
        memory = self.memory_bytes >> 20
        if self.cgroup:
            limits = f"cgroup v{self.cgroup.version}: {memory} MiB and {PROGRAM_PROCESSES} processes per program"
        elif self.one_process:
            limits = (
                f"one process per program (threads only, {PROGRAM_PROCESSES} at most): {memory} MiB of address "
                "space, /tmp apart"
            )
        else:
            processes = (
                f"{PROGRAM_PROCESSES} processes per program"
                if self.world == "user"
                else f"processes of uid {self.program_uid} capped at {self.nproc}"
            )
            limits = f"rlimits only: {memory} MiB per process, {processes}"
        clock = (
            f"the clock: CPU time, under a {wall_guard(self.timeout):g} s wall-clock guard "
            f"({sleeper_guard(self.timeout):g} s for a program that mostly sleeps)"
            if self.cpu is not None
            else "the clock: wall time (a program beside a busy one can time out)"
        )
        filtered = f"seccomp: {allowed(self.one_process)}" if self.seccomp else "no seccomp filter on this architecture"
        own = (
            "each program process in pid and mount namespaces of its own (no /proc, a fresh /tmp), "
            "a read-only root of its own on a tmpfs (the stdlib, offered packages, their libraries)"
        )
        unbounded = (
            f"a program is bounded in memory per process only (its {PROGRAM_PROCESSES} processes can take more) "
            "and judged by the wall clock (a program beside a busy one can time out)"
        )
        unfiltered = "no seccomp filter: a program reaches kernel state"
        if self.world == "root":
            return ReadyReply(
                "full" if self.seccomp else "partial",
                f"namespaces: pid+net+mount+ipc, {own}; uid {NOBODY} (f: {JUDGE_UID}); {filtered}; {limits}; {clock}",
                "" if self.seccomp else unfiltered,
            )
        if self.world == "user":
            return ReadyReply(
                "full" if self.one_process else "partial",
                f"namespaces (a user namespace of its own, no root needed): pid+net+mount+ipc, {own}; no "
                f"capabilities; {filtered}; {limits}; {clock}",
                "" if self.one_process else f"{unfiltered}; {unbounded}",
            )
        return ReadyReply(
            "basic",
            "basic (no namespaces): own session, network and files visible, programs can signal only themselves; "
            f"{filtered}; {limits}; {clock}",
            "a program runs as this user: it can read and write this user's files, reach the network, and leave "
            "files for later programs",
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
                    status, detail, seconds, output, answer, returned = self.run(
                        run.f, run.g, run.answer_type, run.annotated == "1"
                    )
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

    def run(self, f: str, g: str, answer_type: str, annotated: bool) -> tuple[str, str, float, str, str, str]:
        """(status, detail, seconds, output, repr of g's answer, repr of what f returned) for one program: g's
        process, then f's, both on the program's one clock (`annotated`: the answer type is f's annotation, read
        first). Each compiles its own source, under its limits; g's never sees f."""
        clock = Clock(self.timeout, self.cpu)
        try:
            f_code, g_code = self._compiled(f, "f"), self._compiled(g, "g")
        except ProgramError as error:
            return error.status, error.detail, clock.seconds(), "", "", ""
        output = ""
        if annotated:
            status, answer_type, output = self._annotation(f, clock)
            if status != "type":
                return status, answer_type[:DETAIL_CHARS], clock.seconds(), self._capped(output), "", ""
        status, detail, answer, shared, g_output = self._ask(b"runner", (g, g_code, answer_type), clock, 5, "g")
        output += g_output
        returned = ""
        if status == "answer" and not _fits(detail + shared):  # only a reply g forged can be longer, or not ASCII
            status, detail = "error", f"g's answer is not ASCII JSON, or over {ANSWER_BYTES} bytes"
        if status == "answer":
            status, detail, answer, returned, judge_output = self._ask(
                b"judge", (f, f_code, answer_type, detail, shared), clock, 5, "f"
            )
            output += judge_output
        if status != "timeout" and clock.expired():
            status, detail = "timeout", clock.overrun("g and f")
        return (
            status,
            detail[:DETAIL_CHARS],
            clock.seconds(),
            self._capped(output),
            answer[:DETAIL_CHARS],
            returned[:DETAIL_CHARS],
        )

    def apply(self, source: str, function: str, text: str) -> tuple[str, str, float, str, str]:
        """(status, detail, seconds, output, the JSON text `function` returned for the input `text`), in a process
        of its own that runs the program first."""
        clock = Clock(self.timeout, self.cpu)
        try:
            code = self._compiled(source, "program")
        except ProgramError as error:
            return error.status, error.detail, clock.seconds(), "", ""
        status, detail, value, output = self._ask(b"caller", (source, code, function, text), clock, 4, "the program")
        if status != "timeout" and clock.expired():
            status, detail, value = "timeout", clock.overrun("the call"), ""
        if not _fits(value):  # only a reply the program forged itself can be longer, or not ASCII
            status, detail, value = "error", f"the returned value is not ASCII JSON, or over {ANSWER_BYTES} bytes", ""
        return status, detail[:DETAIL_CHARS], clock.seconds(), self._capped(output), value

    def _annotation(self, f: str, clock: Clock) -> tuple[str, str, str]:
        """("type", f's answer type, output) or (status, why, output): read here for a short f (WARDEN_COMPILES:
        bounded work; the last f's is kept), else by a process of the program's own, under its limits and clock."""
        if len(f) > WARDEN_COMPILES:
            return self._ask(b"reader", (f, b""), clock, 3, "f")
        if self.annotation is None or self.annotation[0] != f:
            try:
                self.annotation = f, ("type", answer_type_of(f, None), "")
            except ValueError as error:
                self.annotation = f, ("error", str(error), "")
        return self.annotation[1]

    def _compiled(self, source: str, name: str) -> bytes:
        """`source` compiled and marshalled when it is short (WARDEN_COMPILES: bounded work, and a puzzle's f repeats
        over its attempts: the last is kept), else b"": the program's process compiles it, under its limits and
        clock. ProgramError for a source that does not compile."""
        if len(source) > WARDEN_COMPILES:
            return b""
        if self.compiled is None or self.compiled[0] != source:
            try:
                self.compiled = source, marshal.dumps(compile_source(source, name))
            except ProgramError as error:
                self.compiled = source, error
        if isinstance(self.compiled[1], ProgramError):
            raise self.compiled[1]
        return self.compiled[1]

    def _capped(self, output: str) -> str:
        """A reply's output within what the frame limit allows: each process caps its own, but a program can
        forge its process's reply (and g's and f's outputs add up)."""
        if len(output) > self.output_chars + 200:
            output = output[: self.output_chars] + "\n[... more characters dropped]"
        return output

    def _ask(self, role: bytes, request: tuple, clock: Clock, fields: int, name: str) -> tuple[str, ...]:
        """The `fields` reply fields of a fresh `role` process to `request`, or (status, detail) padded to that
        length when it gave no such reply. The process and everything it started are gone, its OOM kills counted
        and its files out of reach before this returns."""
        pid, channel = self._fork(role)
        reply = problem = None
        try:
            if channel.send(pack(*request), clock):
                reply = channel.receive(clock)
        except Deadline:
            problem = "timeout", clock.overrun(name)
        except ValueError as error:
            problem = "error", f"{name}'s process sent a malformed frame: {error}"
        finally:
            channel.close()
        with clock.paused():
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
        wait_for(self.zygote.fileno(), select.POLLIN, Clock(KILL_SECONDS + 60, None), self.request_fd)
        message, fds, _, _ = socket.recv_fds(self.zygote, 32, 2)
        if len(fds) != 2:
            raise RuntimeError("the zygote is gone")
        self.live = int(message)
        return self.live, Channel(fds[1], fds[0], frame_limit(self.output_chars), self.request_fd)

    def _program_cpu(self) -> float:
        """The CPU seconds of every program process so far, where each program is one process: those that ended
        and the live one's (its process clock, its threads' included; it is reaped only at `_end`)."""
        if self.live is None:
            return self.ended_cpu
        try:
            return self.ended_cpu + time.clock_gettime(((~self.live) << 3) | CPUCLOCK_SCHED)
        except OSError:
            return self.ended_cpu

    def _end(self) -> str:
        """Have the zygote kill the program's processes; says how the main one had ended. Without namespaces, the
        next process then gets a fresh working directory if this one left anything in it."""
        self.zygote.send(b"end")
        wait_for(self.zygote.fileno(), select.POLLIN, Clock(KILL_SECONDS + 60, None), self.request_fd)
        fields = self.zygote.recv(64).split()
        status, complete = int(fields[0]), int(fields[1])
        self.live, self.ended_cpu = None, self.ended_cpu + float(fields[2])
        if not complete:
            raise RuntimeError("could not stop the processes a program left behind")
        if not self.namespaced:
            self._fresh_workspace()
        if status < 0:
            return "it was never seen to end"
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            return "killed" if number == signal.SIGKILL else f"killed by {signal.Signals(number).name}"
        return f"exit code {os.WEXITSTATUS(status)}"

    def _fresh_workspace(self) -> None:
        """Without namespaces: a new directory in O(1) when a program left anything (the old one goes to the
        trash)."""
        try:
            if not os.listdir(self.workspace):
                return
        except OSError:  # a program can lock the directory: it is replaced too
            pass
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


def _fits(text: str) -> bool:
    """Whether an answer or value read from a program process is ASCII (as every answer leaves a runner) within
    ANSWER_BYTES: its characters are then its bytes."""
    return len(text) <= ANSWER_BYTES and text.isascii()


def built_apart(stdlib: str, module_dirs: list[str], as_root: bool) -> str:
    """`build_root` in a child, which shares this process's mount namespace: what finding and copying the root's
    files allocates stays out of the heap the zygote, and so every program process, is forked with (in here it
    scattered the heap: 20% more pages copied on write per program)."""
    builder = os.fork()
    if builder == 0:
        try:
            build_root(stdlib, module_dirs, as_root)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - the warden says it failed
            traceback.print_exc()
            os._exit(1)
    if os.waitpid(builder, 0)[1] != 0:
        raise RuntimeError("could not build the programs' root")
    return ROOT


def enter_user_namespace() -> bool:
    """Enter a user namespace of our own with new mount, pid, net and ipc namespaces, our uid and gid mapped to 0
    there; False where the machine does not allow it (tried first in a child, so that a half-made one is never
    ours)."""
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
    uid, gid = os.getuid(), os.getgid()

    def enter() -> bool:
        if libc.unshare(flags) != 0:
            return False
        try:
            for file, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                with open(f"/proc/self/{file}", "w") as mapping:
                    mapping.write(text)
        except OSError:
            return False
        return True

    probe = os.fork()
    if probe == 0:
        os._exit(0 if enter() else 1)
    if os.waitpid(probe, 0)[1] != 0:
        return False
    return enter()


def main() -> None:
    settings = json.loads(sys.argv[1])
    request_fd, reply_fd = settings["request_fd"], settings["reply_fd"]
    # + 64 MiB and + 1 process: the zygote, which is in the cgroup too
    cgroup = (
        Cgroup.create((settings["memory_mb"] << 20) + (64 << 20), PROGRAM_PROCESSES + 1) if os.geteuid() == 0 else None
    )
    if cgroup and libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC) == 0:
        world = "root"
    else:  # (root without a cgroup of its own: its programs are bounded as in the user world)
        if cgroup:
            cgroup.remove()
            cgroup = None
        world = "user" if enter_user_namespace() else "basic"
    # (once its uid map is written:) no process of the same uid reaches this one, the warden or the zygote (forked
    # from here) through /proc
    libc.prctl(PR_SET_DUMPABLE, 0)
    workspace = None if world != "basic" else __import__("tempfile").mkdtemp(prefix="codeplay-sandbox-")
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
        warden = Warden(settings, world, cgroup, workspace)
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
