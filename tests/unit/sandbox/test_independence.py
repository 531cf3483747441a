"""No verdict depends on any other program, puzzle or run (the sandbox's third round of attacks).

Each class of leak has its attacks here: memory and frames inherited from earlier programs, kernel
state shared by a uid or a host, a judge kept across the attempts at its puzzle, costs charged to
the next program, isolation lost without a word, and unbounded work or memory in the trusted
processes. A program here always runs next to ordinary ones (`contained`), whose verdicts must
stay exactly right.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
import uuid
import warnings

import pytest
from sandbox_support import (
    ORDINARY_PROGRAMS,
    REPO,
    check_ordinary,
    contained,
    program,
    start_supervisor,
    wrong,
)

from codeplay_lightning.execution import Call, IsolationError, Program, Sandbox
from codeplay_lightning.execution.warden.answers import ANSWER_BYTES
from codeplay_lightning.execution.warden.seccomp import SYSCALLS


@pytest.fixture(scope="module")
def mixed():
    """One worker: every program runs right after the one before it, on the same warden. 10 s and 512 MiB:
    room for the scans of a whole process's memory and for two programs of 400 MiB (`namespaced` is it too)."""
    with Sandbox(workers=1, timeout=10.0, memory_mb=512) as box:
        yield box


def secret() -> str:
    return f"codeplay-secret-{uuid.uuid4().hex}"


# What an attacker scans for: the secret's shape, built at run time so that its own code does not match.
SCAN = r'''
import ctypes, gc, re, sys
SHAPE = re.compile(("codeplay" + "-secret-" + "[0-9a-f]{32}").encode())

def found_anywhere():
    """Every secret in reach: frames up the stack, every object the collector knows, and every
    readable byte of this process's memory."""
    found = set()
    frame = sys._getframe()
    while frame is not None:
        found.update(SHAPE.findall(repr(frame.f_locals).encode("utf-8", "replace")))
        frame = frame.f_back
    for item in gc.get_objects():
        try:
            found.update(SHAPE.findall(repr(item).encode("utf-8", "replace")[:100000]))
        except Exception:
            pass
    try:  # /proc/self/mem is closed to it: read through ctypes (with namespaces there is no /proc to read)
        with open("/proc/self/maps") as maps:
            spans = [line.split()[:2] + [line] for line in maps]
    except FileNotFoundError:
        spans = []
    for span, permissions, line in spans:
        if not permissions.startswith("r") or "[vvar" in line or "[vsyscall" in line:
            continue
        start, end = (int(part, 16) for part in span.split("-"))
        found.update(SHAPE.findall(ctypes.string_at(start, end - start)))
    return sorted(found)
'''


# ---------------------------------------------------------------- 1. fresh processes from a clean zygote


def test_no_program_process_holds_an_earlier_program_answer_or_text(mixed):
    """A solve, then copiers on the same warden scanning frames, objects and all of their memory:
    they find neither the earlier answer nor the puzzle's text (f never reaches g's process)."""
    answer = secret()
    puzzle = f"def f(x: str):\n    return x == {answer!r}"
    copier = SCAN + "\ndef g():\n    found = found_anywhere()\n    return found[0].decode() if found else 'none'"
    judge_scan = SCAN + "\ndef f(x: str):\n    return x == 'clean' and found_anywhere() == []"
    solve = Program(puzzle, f"def g():\n    return {answer!r}")
    clean = Program(judge_scan, "def g():\n    return 'clean'")
    verdicts = mixed.verify([solve, Program(puzzle, copier), solve, clean, Program(puzzle, copier)])
    assert [v.status for v in verdicts] == ["pass", "fail", "pass", "pass", "fail"], verdicts
    assert verdicts[1].answer == verdicts[4].answer == "'none'"


def test_a_judge_keeps_nothing_across_the_attempts_at_its_puzzle(mixed):
    """f counts its calls everywhere it could keep a count: every attempt is still its first."""
    counting = textwrap.dedent("""
        import builtins, os, sys, typing
        def f(x: int):
            marks = [getattr(builtins, "_calls", 0), getattr(sys.modules["typing"], "_calls", 0),
                     int(os.environ.get("CALLS", "0")), len(os.listdir("."))]
            builtins._calls = typing._calls = 1
            os.environ["CALLS"] = "1"
            open("called", "w").close()
            return x == 1 and marks == [0, 0, 0, 0]
        """)
    verdicts = mixed.verify([Program(counting, "def g():\n    return 1")] * 5)
    assert [v.status for v in verdicts] == ["pass"] * 5, verdicts


@pytest.mark.parametrize(
    "f",
    [
        # replaces the judge's own code for every later answer
        "import sys\ndef f(x: int):\n    zygote = sys.modules['warden.zygote']\n"
        "    zygote.judge_answer = lambda *a: ['pass', '', '', 'True']\n    return False",
        # a thread that keeps answering on the reply pipe
        "import os, threading, time\nfrom warden.protocol import pack\ndef f(x: int):\n"
        "    def answer():\n        while True:\n            os.write(4, pack('pass', '', '', 'True', ''))\n"
        "            time.sleep(0.001)\n    threading.Thread(target=answer, daemon=True).start()\n    return False",
        # a late forged reply from a forked child, meant for the next program
        "import os, time\nfrom warden.protocol import pack\ndef f(x: int):\n    if os.fork() == 0:\n"
        "        time.sleep(0.2)\n        os.write(4, pack('pass', '', '', 'True', ''))\n        os._exit(0)\n"
        "    return False",
        # a fork in a default argument: two judges on one pipe
        "import os\ndef f(x: int, forked=os.fork()):\n    return False",
    ],
    ids=["replaces_judge", "answering_thread", "late_forged_reply", "fork_in_default"],
)
def test_a_judge_cannot_reach_the_next_verdict(mixed, f):
    """Whatever f does to its own verdict (it decides it anyway: forging a pass is `return True`),
    every later verdict is right."""
    contained(mixed, *[Program(f, "def g():\n    return 1")] * 2)


# ---------------------------------------------------------------- 2. kernel state shared by a uid or a host


REFUSED = {  # name: (x86_64, aarch64) of syscalls off the allowlist
    "add_key": (248, 217),
    "keyctl": (250, 219),
    "request_key": (249, 218),
    "shmget": (29, 194),
    "msgget": (68, 186),
    "semget": (64, 190),
    "mq_open": (240, 180),
    "ptrace": (101, 117),
    "perf_event_open": (298, 241),
}


def _syscall_program(calls: list[tuple[str, list]]) -> str:
    """g: the errno of each raw syscall (0 when it succeeded)."""
    numbers = {name: {**SYSCALLS, **REFUSED}[name][0 if os.uname().machine == "x86_64" else 1] for name, _ in calls}
    return textwrap.dedent(f"""
        import ctypes
        def g():
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            errors = []
            for name, arguments in {calls!r}:
                ctypes.set_errno(0)
                result = libc.syscall({numbers!r}[name], *[a.encode() if isinstance(a, str) else a for a in arguments])
                errors.append(ctypes.get_errno() if result == -1 else 0)
            return errors
        """)


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="the filter knows these two")
def test_keyrings_ipc_and_introspection_are_denied(mixed):
    """Keyrings are shared by every process of a uid host-wide and outlive the run; SysV and POSIX
    IPC, ptrace and new namespaces would reach other programs too: each call fails with EPERM."""
    calls = [
        ("add_key", ["user", "codeplay", "answer", 6, -4]),
        ("keyctl", [0, -4, 0]),  # -4: the user keyring
        ("request_key", ["user", "codeplay", 0, 0]),
        ("shmget", [0, 4096, 0o1666]),
        ("msgget", [0, 0o1666]),
        ("semget", [0, 1, 0o1666]),
        ("mq_open", ["codeplay", 0o102, 0o666, 0]),
        ("ptrace", [16, 1, 0, 0]),
        ("unshare", [0x10000000]),
        ("setns", [0, 0]),
        ("perf_event_open", [0, 0, -1, -1, 0]),
    ]
    every_one_denied = f"def f(x: List[int]):\n    return x == [1] * {len(calls)}"  # 1: EPERM
    (verdict,) = contained(mixed, program(every_one_denied, _syscall_program(calls)))
    assert verdict.status == "pass", verdict


def test_no_program_makes_a_socket_pipe_or_memfd(mixed):
    """An abstract unix socket is shared by a network namespace, and pipes, sockets and memfds draw their inode
    numbers from counters of the whole machine: no program makes one (the two pipes it is given are its own)."""
    makers = {
        "socket": "socket.socket(socket.AF_UNIX)",
        "socketpair": "socket.socketpair()",
        "pipe": "os.pipe()",
        "memfd": "os.memfd_create('x')",
    }
    for name, make in makers.items():
        g = f"import os, socket\ndef g():\n    try:\n        {make}\n    except PermissionError:\n"
        g += "        return 'denied'"
        (verdict,) = mixed.verify([program("def f(x: str):\n    return x == 'denied'", g)])
        assert verdict.status == "pass", (name, verdict)


def test_the_root_holds_what_the_docs_say(namespaced):
    """No /dev/shm, four devices, and no site-packages directory: not even the base interpreter's packages can be
    imported by adding them to the path."""
    base_site = sysconfig.get_path("purelib", vars={"base": sys.base_prefix})
    g = textwrap.dedent(f"""
        import os, sys
        def g():
            sys.path.append({base_site!r})
            try:
                import pip
                importable = True
            except ImportError:
                importable = False
            return [sorted(os.listdir("/dev")), os.path.exists("/dev/shm"),
                    os.path.isdir({base_site!r}) and os.listdir({base_site!r}), importable, os.listdir("/etc")]
        """)
    (verdict,) = contained(namespaced, program("def f(x):\n    return False", g))
    assert json.loads(verdict.answer.replace("'", '"').replace("False", "false").replace("True", "true")) == [
        ["null", "random", "urandom", "zero"],
        False,
        False,  # not even the directory
        False,
        [],
    ], verdict


# ---------------------------------------------------------------- 4. costs charged to the program that caused them


OUT_OF_MEMORY_F = textwrap.dedent("""
    import os, time
    def f(x: int):
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                block = bytearray(200 << 20)  # together past the program's cgroup, each under its rlimit
                time.sleep(1)
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        return x == 1
    """)


def test_an_oom_kill_is_charged_to_the_program_that_caused_it(namespaced):
    verdicts = namespaced.verify([Program(OUT_OF_MEMORY_F, "def g():\n    return 1"), *ORDINARY_PROGRAMS])
    assert verdicts[0].status == "memory" and "f's processes ran out" in verdicts[0].detail, verdicts[0]
    check_ordinary(verdicts[1:])


def test_files_a_program_left_cost_the_next_program_nothing(mixed):
    """80,000 directories and a chain 6,000 deep: the next program starts at once, its clock unaffected."""
    litter = textwrap.dedent("""
        import os
        def g():
            for index in range(80000):
                os.mkdir(f"d{index}")
            for _ in range(6000):
                os.mkdir("a")
                os.chdir("a")
            return 0
        """)
    started = time.monotonic()
    verdicts = mixed.verify([wrong(litter), *ORDINARY_PROGRAMS])
    assert verdicts[0].status == "fail", verdicts[0]
    check_ordinary(verdicts[1:])
    assert max(v.seconds for v in verdicts[1:]) < 0.5, [v.seconds for v in verdicts]
    assert time.monotonic() - started - verdicts[0].seconds < 5


def test_a_large_program_runs_right_after_another(namespaced):
    """The memory one program used is all returned before the next runs: two programs of 400 MiB
    each on a 512 MiB sandbox both pass."""
    big = "def g():\n    block = bytearray(400 << 20)\n    return len(block) >> 20"
    verdicts = namespaced.verify([program("def f(x: int):\n    return x == 400", big)] * 2)
    assert [v.status for v in verdicts] == ["pass", "pass"], verdicts


def test_the_answer_cap_is_the_documented_one(mixed):
    fits = f"def g():\n    return 'x' * {ANSWER_BYTES - 2}"  # JSON adds the two quotes
    too_big = f"def g():\n    return 'x' * {ANSWER_BYTES - 1}"
    verdicts = mixed.verify(
        [
            program(f"def f(x: str):\n    return len(x) == {ANSWER_BYTES - 2}", fits),
            program("def f(x: str):\n    return True", too_big),
        ]
    )
    assert verdicts[0].status == "pass", verdicts[0]
    assert verdicts[1].status == "error" and f"at most {ANSWER_BYTES}" in verdicts[1].detail, verdicts[1]


# ---------------------------------------------------------------- 6. isolation never degrades silently


def _cgroups_of(pid: int) -> set[str]:
    with open(f"/proc/{pid}/cgroup") as lines:
        return {line.rstrip("\n").rsplit("/", 1)[-1] for line in lines if "codeplay-" in line}


def test_every_sandbox_gets_a_cgroup_of_its_own(namespaced):
    """Names are random, not pid numbers, which repeat across pid namespaces."""
    probe = "import os\ndef g():\n    return os.getpid()"
    with Sandbox(workers=1) as other:
        other.verify([program("def f(x: int):\n    return True", probe)])
        names = [
            set().union(*(_cgroups_of(child) for child in _descendants(launcher.launcher.pid)))
            for launcher in (namespaced._wardens[0], other._wardens[0])
        ]
    assert all(len(name) == 1 and len(next(iter(name))) == len("codeplay-") + 16 for name in names), names
    assert names[0] != names[1]


def _descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        for task in os.listdir(f"/proc/{parent}/task"):
            with open(f"/proc/{parent}/task/{task}/children") as children:
                stack += [int(child) for child in children.read().split()]
        found.append(parent)
    return found


LEVELLED_WARDEN = """
try:
    os.close(os.open({flag!r}, os.O_CREAT | os.O_EXCL))
    first = True
except FileExistsError:
    first = False
    time.sleep(0.5)  # ready after the first: the first is the level every other is held to
level, isolation, exposure = ("full", "full, a fake", "") if first else ("partial", "less, a fake", "it can do more")
write_all(replies, pack("ready", level, isolation, exposure))
while (request := read_frame(requests, 1 << 31)) is not None:
    write_all(replies, pack("verdict", request[1], "fail", "0.1", "", "", "", ""))
"""


@pytest.mark.parametrize("required", [False, True], ids=["warned", "refused"])
def test_a_warden_that_isolates_less_is_warned_of_or_refused(fake_warden, tmp_path, required):
    fake_warden(LEVELLED_WARDEN.format(flag=str(tmp_path / "started")))
    with Sandbox(workers=2, require_isolation=required) as box, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if required:
            with pytest.raises(
                IsolationError, match=r"full isolation is required, and here it can do more \(less, a fake\)"
            ):
                _ = box.isolation  # waits for every warden, as `verify` does before it hands one a program
        else:
            assert box.isolation == "full, a fake"
            assert [v.status for v in box.verify(ORDINARY_PROGRAMS[:4])] == ["fail"] * 4
            assert [str(w.message) for w in caught] == ["sandbox isolation is degraded: it can do more (less, a fake)"]


# ---------------------------------------------------------------- 7. bounded everywhere


OVERSIZED_VALUE_WARDEN = """
write_all(replies, pack("ready", "full", "a fake", ""))
value = "[" + "[]," * (ANSWER_BYTES // 3) + "[]]"  # a value of [] lists, one past the cap
while (request := read_frame(requests, 1 << 31)) is not None:
    write_all(replies, pack("returned", request[1], "returned", "0.1", "", "", value))
"""


def test_a_value_past_the_cap_is_refused_before_it_is_decoded(fake_warden):
    fake_warden(OVERSIZED_VALUE_WARDEN)
    with Sandbox(workers=1) as box:
        (verdict,) = box.apply([Call("def f(x):\n    return x", "f", 1)])
    assert verdict.judge_fault and "sandbox lost this program" in verdict.detail, verdict


def test_removing_a_tree_deeper_than_any_stack_goes_on_where_it_stopped(tmp_path):
    """Without root, what programs leave is deleted between requests, a slice at a time: a chain
    6,000 deep, locked at every level, then 20,000 entries."""
    from codeplay_lightning.execution.warden.isolation import Removal

    top = tmp_path / "left"
    os.mkdir(top)
    descriptor = os.open(top, os.O_RDONLY)
    for _ in range(6000):  # deeper than any path: made one level at a time from the level above
        os.mkdir("a", dir_fd=descriptor)
        deeper = os.open("a", os.O_RDONLY, dir_fd=descriptor)
        os.chmod(descriptor, 0o500)
        os.close(descriptor)
        descriptor = deeper
    os.close(descriptor)
    for index in range(20000):
        (top / f"f{index}").touch()
    removal, slices = Removal(str(top)), 1
    while not removal.step(time.monotonic() + 0.01):
        slices += 1
    assert not top.exists() and slices > 1


@pytest.mark.parametrize(
    "annotation, status",
    [
        ("+".join(["1"] * 500), "error"),  # parsed, then refused as a type
        ("+".join(["1"] * 100_000), "syntax"),  # past the parser
        ("List[" * 1000 + "int" + "]" * 1000, "syntax"),
    ],
    ids=["plus_500", "plus_100000", "list_1000_deep"],
)
def test_annotations_past_any_stack_are_verdicts(mixed, annotation, status):
    (verdict,) = contained(mixed, Program(f"def f(x: {annotation}):\n    return True", "def g():\n    return 1"))
    assert verdict.status == status, verdict


def _peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


@pytest.mark.parametrize(
    "frame",
    [
        "struct.pack('>I', 0xFFFFFFF0) + b'x' * (64 << 20)",  # announces 4 GB, streams 64 MB
        "pack('answer', 'x' * (64 << 20), '', '', '')",  # a well-formed frame far past the cap
    ],
    ids=["announced", "sent"],
)
def test_a_forged_runner_frame_is_refused_before_it_is_read(mixed, frame):
    g = f"import os, struct\nfrom warden.protocol import pack\ndef g():\n    os.write(4, {frame})\n    return 1"
    (verdict,) = contained(mixed, wrong(g))
    assert verdict.status == "error" and "malformed frame" in verdict.detail, verdict
    warden = mixed._wardens[0].pid
    if mixed.isolation.startswith("namespaces"):  # the warden's pid, as the host sees it
        warden = _descendants(mixed._wardens[0].launcher.pid)[1]
    assert _peak_kib(warden) < 200 << 10


@pytest.mark.parametrize(
    "answer",  # built in g: a literal this long is over the cap on a source
    [f"'\"' + 'x' * {ANSWER_BYTES} + '\"'", f"'\"' + '\u00e9' * {ANSWER_BYTES // 2 + 1} + '\"'"],
    ids=["ascii", "utf8_under_the_cap_in_characters"],
)
def test_a_forged_answer_past_the_cap_never_reaches_the_judge(mixed, answer):
    """A frame small enough to be read (the frame limit leaves room for the reply's details) whose answer is over
    ANSWER_BYTES bytes (an answer leaves a runner as ASCII: at 2 bytes a character, half as many characters are
    past the cap too): the warden refuses it before any judge sees it."""
    g = "import os\nfrom warden.protocol import pack\ndef g():\n"
    g += f"    os.write(4, pack('answer', {answer}, '', '', ''))\n    os._exit(0)"
    (verdict,) = contained(mixed, program("def f(x):\n    return True", g))
    assert verdict.status == "error" and "g's answer is not ASCII JSON, or over" in verdict.detail, verdict


SUPERVISOR_OF_LONG_SOURCES = """
import json
from codeplay_lightning.execution import Program, Sandbox
padding = "values = [" + "1," * 500_000 + "]\\n"  # 1 MB: ~500 MiB to parse
g = "def g():\\n    return 1\\n"
with Sandbox(workers=1, timeout=20.0) as box:
    verdicts = box.verify([Program(padding + "def f(x: List[int]):\\n    return True\\n", g),
                           Program(padding + "def f(x: dict):\\n    return True\\n", g),
                           Program("def f(x: List[int]):\\n    return True\\n", g)])
with open("/proc/self/status") as status:  # (this process's own peak: ru_maxrss keeps its parent's across exec)
    peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps([[v.status, v.detail] for v in verdicts] + [peak_kib]))
"""


def test_the_supervisor_never_parses_a_program(tmp_path):
    """A program given no answer type takes f's annotation: read by the warden for a short f, by a process of the
    program's own for a long one, under its limits and clock; the supervisor only passes f on."""
    script = tmp_path / "supervisor.py"
    script.write_text(SUPERVISOR_OF_LONG_SOURCES)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    *verdicts, peak_kib = json.loads(result.stdout.splitlines()[-1])
    assert verdicts[0][0] == "fail" and "not of type List[int]" in verdicts[0][1], verdicts
    assert verdicts[1][0] == "error" and "unsupported answer type 'dict'" in verdicts[1][1], verdicts
    assert verdicts[2][0] == "fail" and "not of type List[int]" in verdicts[2][1], verdicts
    assert peak_kib < 100 << 10  # (parsing the long f's here: ~500 MiB)


def test_sources_are_compiled_in_the_program_process_under_its_limits(tmp_path):
    """A source over the cap never reaches a warden; one under it that takes the compiler hundreds of MiB is
    compiled in the program's own process, under its memory limit: the warden stays small."""
    huge = "def f(x):\n    return True\n" + "#" * (4 << 20)
    heavy = "values = [" + "1," * 450_000 + "]\ndef f(x):\n    return True"  # 0.9 MB, ~150 MiB to compile
    with Sandbox(workers=1, timeout=5.0, memory_mb=64) as box:
        big, expensive = box.verify([Program(huge, "def g():\n    return 1"), Program(heavy, "def g():\n    return 1")])
        warden = box._wardens[0].pid
        if box.isolation.startswith("namespaces"):
            warden = _descendants(box._wardens[0].launcher.pid)[1]
        assert big.status == "error" and "over the sandbox's" in big.detail, big
        assert expensive.status in ("memory", "syntax"), expensive
        assert _peak_kib(warden) < 100 << 10


def test_the_warden_exits_within_a_second_of_its_supervisor(tmp_path):
    """Mid-program, with 80,000 files to delete: the warden and every program process are gone
    within a second of the supervisor's SIGKILL."""
    g = (
        "import os, time\ndef g():\n    for index in range(80000):\n        os.mkdir(f'd{index}')\n"
        "    open('ready', 'w').close()\n    time.sleep(60)"
    )
    supervisor = start_supervisor(tmp_path, g, workers=1)
    time.sleep(3)  # the program is making its directories
    tree = _descendants(supervisor.pid)[1:]
    cgroups = {directory for pid in tree for directory in _cgroup_directories(pid)}
    assert tree
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait()
    killed = time.monotonic()
    launchers = [pid for pid in tree if _ppid(pid) == 1 or _ppid(pid) == supervisor.pid]
    while (alive := [pid for pid in tree if pid not in launchers and _alive(pid)]) and time.monotonic() < killed + 1.0:
        time.sleep(0.01)
    assert alive == [], f"still alive {time.monotonic() - killed:.2f} s after the supervisor's death"
    while (left := [directory for directory in cgroups if os.path.exists(directory)]) and time.monotonic() < killed + 5:
        time.sleep(0.05)
    assert left == []  # the launchers removed them


def _cgroup_directories(pid: int) -> list[str]:
    """The host paths of the sandbox's cgroups that `pid` is in."""
    with open(f"/proc/{pid}/cgroup") as lines:
        entries = [line.rstrip("\n").split(":", 2) for line in lines if "codeplay-" in line]
    return [
        f"/sys/fs/cgroup/{controllers.split(',')[0]}{path}" if controllers else f"/sys/fs/cgroup{path}"
        for _, controllers, path in entries
    ]


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_seccomp_filter_program_is_well_formed():
    """Every jump lands inside the program and it ends by returning; the numbers are distinct."""
    from codeplay_lightning.execution.warden.seccomp import (
        ABSENT,
        RETURN,
        ZYGOTE_NEEDS,
        denial_filter,
        program_filter,
        signal_filter,
        zygote_filter,
    )

    filters = (
        zygote_filter(),
        program_filter(False),
        program_filter(True),
        denial_filter(ZYGOTE_NEEDS),
        signal_filter(9),
    )
    for program_bytes in filters:
        if program_bytes is None:
            pytest.skip("no filter on this architecture")
        instructions = [program_bytes[i : i + 8] for i in range(0, len(program_bytes), 8)]
        decoded = [(int.from_bytes(ins[:2], "little"), ins[2], ins[3]) for ins in instructions]
        assert decoded[-1][0] == RETURN
        for index, (code, true, false) in enumerate(decoded):
            if code & 0x07 == 0x05:  # a jump
                assert index + 1 + max(true, false) < len(decoded)
    for column in (0, 1):
        numbers = [numbers[column] for numbers in [*SYSCALLS.values(), *ABSENT.values()] if numbers[column] is not None]
        assert len(set(numbers)) == len(numbers)
