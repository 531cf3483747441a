"""What the sandbox suites share: ordinary programs whose verdicts must stay exactly right after any
hostile one, the checks that nothing a program started outlives it, the hostile programs more than one
suite runs, and the stand-ins for the processes around a sandbox (a supervisor, a fake warden)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

from codeplay_lightning.execution import Program, Sandbox, Verdict

REPO = Path(__file__).resolve().parents[3]
FAST = 0.5  # timeout for sandboxes where timeouts are expected
CALLER_PARENT = os.getppid()


def program(f: str, g: str, ans_type: str | None = None) -> Program:
    return Program(textwrap.dedent(f).strip() + "\n", textwrap.dedent(g).strip() + "\n", ans_type)


def wrong(g: str) -> Program:
    """A hostile `g` whose answer is wrong: the only right verdicts are fail, error, timeout, memory."""
    return program("def f(x):\n    return x == 5", g)


# ---------------------------------------------------------------- ordinary programs


ORDINARY: list[tuple[Program, str, str]] = [  # (program, status, what its detail must contain)
    (
        program(
            """
        import math
        def f(x: List[int]) -> bool:
            return len(x) == 3 and math.sqrt(16) == 4.0 and sorted(x) == [1, 2, 3]
        """,
            "def g():\n    return [3, 1, 2]",
        ),
        "pass",
        "",
    ),
    (
        program(
            """
        import collections
        def f(s: str) -> bool:
            return collections.Counter(s).most_common(1) == [("b", 2)]
        """,
            "def g():\n    return 'abb'",
        ),
        "pass",
        "",
    ),
    (
        program(
            """
        from typing import List
        import math
        def f(x: List[float]) -> bool:
            return x == [math.sqrt(4.0)]
        """,
            "def g():\n    return [2.0]",
        ),
        "pass",
        "",
    ),
    (
        program("def f(x: List[int]) -> bool:\n    return len(x) == 4", "def g():\n    return [1, 2, 3]"),
        "fail",
        "f returned False for x = [1, 2, 3]",
    ),
    (
        program("import math\ndef f(x: int) -> bool:\n    return math.sqrt(x) == 3.0", "def g():\n    return 10"),
        "fail",
        "f returned False",
    ),
    (
        program("def f(x: int) -> bool:\n    return sorted([x, 1]) == [2, 1]", "def g():\n    return 2"),
        "fail",
        "f returned False",
    ),
    (program("def f(x: int) -> bool:\n    return x / 0 == 1", "def g():\n    return 1"), "error", "ZeroDivisionError"),
]
ORDINARY_PROGRAMS = [entry[0] for entry in ORDINARY]


def check_ordinary(verdicts: list[Verdict]) -> None:
    assert len(verdicts) == len(ORDINARY)
    for verdict, (prog, status, fragment) in zip(verdicts, ORDINARY):
        assert verdict.status == status, (prog.f, verdict)
        assert fragment in verdict.detail, (prog.f, verdict)


# ---------------------------------------------------------------- processes


def process_table() -> dict[int, tuple[int, str, bytes]]:
    """pid -> (ppid, state, cmdline) for every process on the host."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), fields[0].decode(), command)
    return table


def strays(marker: str | None = None) -> list:
    """Live processes that should not exist: below this process, anything but sandbox launchers
    (depth 1), wardens (depth 2) and one judge per warden (depth 3); anywhere on the host, anything
    whose command line carries `marker`."""
    table = process_table()
    children = defaultdict(list)
    for pid, (ppid, _, _) in table.items():
        children[ppid].append(pid)
    found = []
    stack = [(pid, 1) for pid in children[os.getpid()]]
    while stack:
        pid, depth = stack.pop()
        _, state, command = table[pid]
        if state in ("Z", "X"):  # dead, waiting to be reaped
            continue
        live = [child for child in children[pid] if table[child][1] not in ("Z", "X")]
        if depth > 3 or b"-m\x00warden" not in command or (depth == 2 and len(live) > 1):
            found.append((pid, depth, state, command[:200]))
        stack.extend((child, depth + 1) for child in children[pid])
    if marker is not None:
        found += [
            (pid, state, command)
            for pid, (_, state, command) in table.items()
            if marker.encode() in command and state not in ("Z", "X")
        ]
    return found


def assert_nothing_outlives(marker: str | None = None, grace: float = 2.0) -> None:
    """(a) and (c): the caller and its parent are alive; nothing the programs started is left."""
    assert os.getppid() == CALLER_PARENT
    try:
        os.kill(CALLER_PARENT, 0)
    except PermissionError:  # alive, and another user's (the suite run as another uid than its launcher)
        pass
    deadline = time.monotonic() + grace
    while (found := strays(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert found == []


def contained(box: Sandbox, *hostile: Program, marker: str | None = None) -> list[Verdict]:
    """Run `hostile`, each followed by the ordinary programs in the same batch, then the ordinary
    programs again in a later batch; check (a), (c) and (d). Returns the hostile programs' verdicts."""
    batch = []
    for prog in hostile:
        batch += [prog, *ORDINARY_PROGRAMS]
    verdicts = box.verify(batch)
    assert len(verdicts) == len(batch)
    step = 1 + len(ORDINARY)
    for start in range(0, len(batch), step):
        check_ordinary(verdicts[start + 1 : start + step])
    assert_nothing_outlives(marker)
    check_ordinary(box.verify(ORDINARY_PROGRAMS))
    return verdicts[::step]


def marker() -> str:
    return f"{random.randrange(10**6, 10**7)}.{os.getpid()}{random.randrange(10**6)}"


# ---------------------------------------------------------------- hostile programs more than one suite runs


SIGNAL_PROOF = """
    import signal
    def g():
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        for number in signal.valid_signals():
            try:
                signal.signal(number, signal.SIG_IGN)
            except (OSError, ValueError, RuntimeError):
                pass
        while True:
            pass
"""


FRAME_FUNCTION = """
def frame(*fields):
    parts = [field.encode() for field in fields]
    body = struct.pack(">H", len(parts)) + b"".join(struct.pack(">I", len(p)) for p in parts) + b"".join(parts)
    return struct.pack(">I", len(body)) + body
"""


def forging(data: str, then: str = "return 4") -> Program:
    """A hostile g that writes the bytes `data` evaluates to on every file descriptor it might hold,
    its own answer pipe among them, then does `then`."""
    return wrong(f"""
import os, struct
{FRAME_FUNCTION}
def g():
    data = {data}
    for fd in range(64):
        try:
            os.write(fd, data)
        except OSError:
            pass
    {then}
""")


FORGED_PASS = 'frame("pass", "", "", "")'


STOP_THE_JUDGE = """import os, signal
def g():
    me, parent = os.getpid(), os.getppid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == parent:
                        os.kill(int(entry), signal.SIGSTOP)  # the judge is the warden's other child
            except (OSError, ValueError):
                pass
    raise ValueError("no answer to judge")
"""


# ---------------------------------------------------------------- the processes around a sandbox


SUPERVISOR = """
import sys
from codeplay_lightning.execution import Program, Sandbox
g, workers = sys.argv[1], int(sys.argv[2])
with Sandbox(workers=workers, timeout=60.0) as box:
    print(box.isolation, flush=True)
    box.verify([Program("def f(x):\\n    return True", g)] * workers)
"""


def start_supervisor(directory: Path, g: str, workers: int) -> subprocess.Popen:
    """A Python process (the script `directory`/supervisor.py) whose sandbox of `workers` wardens runs `g` on
    every warden; returned once its sandbox is up."""
    script = directory / "supervisor.py"
    script.write_text(SUPERVISOR)
    supervisor = subprocess.Popen(
        [sys.executable, str(script), g, str(workers)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    supervisor.stdout.readline()
    return supervisor


FAKE_WARDEN_START = """
import json, os, struct, sys, time
sys.dont_write_bytecode = True  # the framing below is the package's warden: no __pycache__ is written there
sys.path.insert(0, {execution!r})
from warden.answers import ANSWER_BYTES
from warden.protocol import pack, read_frame, write_all
settings = json.loads(sys.argv[1])
requests, replies = settings["request_fd"], settings["reply_fd"]
write_all(replies, pack("pid", str(os.getpid())))
"""
