"""The warden: its start (root, namespaces, cgroup, the zygote) and its request loop."""

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

from .answers import ANSWER_CHARS
from .isolation import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    MNT_DETACH,
    PR_SET_DUMPABLE,
    Cgroup,
    Removal,
    _check,
    _libc,
    _mount_tmp,
    _tasks_of,
    build_root,
    oom_kills,
)
from .programs import ProgramError, compile_puzzle, compile_source
from .protocol import (
    DETAIL_CHARS,
    ROLE_STATUSES,
    ApplyRequest,
    FrameReader,
    ReadyReply,
    ReturnedReply,
    RunRequest,
    VerdictReply,
    frame_limit,
    pack,
    read_frame,
    write_all,
)
from .seccomp import seccomp_filter
from .zygote import JUDGE_UID, KILL_SECONDS, NOBODY, Zygote

PROGRAM_PROCESSES = 32  # processes one program may have at once (itself included)
TRASH_SLICE = 0.05  # seconds of deleting what programs left, between requests, without root
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
