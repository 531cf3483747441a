"""Without root: the sandbox isolates programs in a user namespace of its own where the machine allows one, at the
level training needs (no cgroup: each program is one process, threads only, so its address space bounds its memory
and its CPU time is the clock), and with rlimits and seccomp only where it does not (a container that forbids
namespaces: here, a filter that refuses `unshare`); it says which, and judges every program right either way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sandbox_support import (
    ORDINARY,
    REPO,
    STOP_THE_JUDGE,
    marker,
    process_table,
)

# ---------------------------------------------------------------- without root


UNPRIVILEGED = """
import json, os, sys
from codeplay_lightning.execution import Program, Sandbox, Verdict
from codeplay_lightning.execution.warden.seccomp import denial_filter, install_seccomp
cases, world = json.loads(sys.argv[1])
if world == "basic":  # as a container that forbids namespaces
    install_seccomp(denial_filter(("unshare",)))
with Sandbox(workers=2, timeout=1.0, memory_mb=256) as box:
    isolation = box.isolation
    verdicts = box.verify([Program(f, g) for f, g, _ in cases])
    level = box.level
print(json.dumps({"uid": os.getuid(), "isolation": isolation, "level": level, "statuses": [v.status for v in verdicts],
                  "details": [v.detail for v in verdicts], "seconds": [v.seconds for v in verdicts]}))
"""


KILL_EVERY_PEER = """import errno, os, signal
def g():
    me, outcomes = os.getpid(), []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit() and int(entry) != me and os.stat(f"/proc/{entry}").st_uid == os.getuid():
            try:
                os.kill(int(entry), signal.SIGKILL)
                outcomes.append(0)
            except OSError as error:
                outcomes.append(error.errno)
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError as error:
        outcomes.append(error.errno)
    return outcomes
"""
FORGE_THROUGH_PROC = """import os
def g():
    forged = 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:  # the supervisor's pipes, by their fds
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                for fd in os.listdir(f"/proc/{entry}/fd"):
                    with open(f"/proc/{entry}/fd/{fd}", "wb") as pipe:
                        pipe.write(b"\\0\\0\\0\\0")
                        forged += 1
            except OSError:
                pass
    return forged
"""
FORK_ERRNO = """import os
def g():
    try:
        if os.fork() == 0:
            os._exit(0)
    except OSError as error:
        return error.errno
    return 0
"""
SIGNAL_BY_FD_OWNER = """import fcntl, os, signal
def g():
    read_end = 3  # its request pipe
    fcntl.fcntl(read_end, fcntl.F_SETOWN, os.getppid() or 1)
    fcntl.fcntl(read_end, 10, signal.SIGKILL)  # F_SETSIG
    fcntl.fcntl(read_end, fcntl.F_SETFL, os.O_ASYNC)
    return 4
"""


def _unprivileged_command(held: list[str]) -> list[str]:
    """Runs the script in $SCRIPT with the argument $ARGUMENT as uid 65534, in a private mount
    namespace where the interpreter, the virtual environment and this checkout are reachable
    wherever they live: every directory on their paths that others cannot enter (a pyenv under
    /root, a clone in a 0700 `mktemp -d`) is covered with a tmpfs that holds only the entries on
    those paths, bind-mounted back. `held` gets the empty directories used on the way."""
    needed = [Path(os.path.realpath(path)) for path in (sys.base_prefix, sys.prefix, REPO / "codeplay_lightning")]
    closed = sorted(
        {
            Path(*path.parts[:depth])
            for path in needed
            for depth in range(1, len(path.parts))
            if not os.stat(Path(*path.parts[:depth])).st_mode & 0o001
        },
        key=lambda path: len(path.parts),
    )
    mounts = []
    for ancestor in closed:
        entries = sorted(
            {
                ancestor / path.parts[len(ancestor.parts)]
                for path in needed
                if path.parts[: len(ancestor.parts)] == ancestor.parts
            }
        )
        held += [tempfile.mkdtemp(prefix="codeplay-reachable-") for _ in entries]
        mounts += [f"mount --bind {entry} {hold}" for entry, hold in zip(entries, held[-len(entries) :])]
        mounts.append(f"mount -t tmpfs -o mode=755 tmpfs {ancestor}")
        mounts += [
            f"mkdir {entry} && mount --move {hold} {entry}" for entry, hold in zip(entries, held[-len(entries) :])
        ]
    run = (
        f"exec setpriv --reuid=65534 --regid=65534 --clear-groups env PYTHONPATH={REPO} "
        f'{sys.executable} -c "$SCRIPT" "$ARGUMENT"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", " && ".join([*mounts, run])]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become another user")
@pytest.mark.parametrize("world", ["user", "basic"])
def test_without_root_the_sandbox_says_how_it_isolates_and_still_judges(world):
    mark = marker()
    cases = [(prog.f, prog.g, status) for prog, status, _ in ORDINARY] + [
        ("def f(x):\n    return x == 5", "def g():\n    while True:\n        pass", "timeout"),
        ("def f(x):\n    return x == 5", "def g():\n    return [0] * (1 << 40)", "memory"),
        (
            "def f(x: int):\n    return x < 100",
            "import os, time\ndef g():\n    n = 0\n    for _ in range(300):\n"
            "        try:\n            if os.fork() == 0:\n"
            "                time.sleep(30)\n                os._exit(0)\n"
            "            n += 1\n        except OSError:\n            break\n    return n",
            "pass",
        ),
        (
            "def f(x):\n    return x == 5",
            f"import os\ndef g():\n    os.posix_spawnp('sleep', ['sleep', '{mark}'], os.environ)\n    return 4",
            "error",  # a vfork and an exec are off the allowlist (and a user namespace's root has no `sleep`)
        ),
        (
            "def f(x):\n    return x == 5",
            "import os\ndef g():\n    os.makedirs('a/b')\n    os.chmod('a/b', 0)\n    os.chmod('a', 0)\n    return 4",
            "fail",
        ),
        ("def f(x: List[str]):\n    return x == []", "import os\ndef g():\n    return os.listdir('.')", "pass"),
        # the same uid as the judge here: a judge the runner stopped is replaced before the next program
        ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
        ("def f(x: int):\n    return x == 5", STOP_THE_JUDGE, "error"),
        ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
        # every other process of its uid - the zygote, the wardens, their launchers, the supervisor - and -1: in a
        # user namespace it sees none (and kill(-1) reaches none); without one, every signal is refused
        (
            "def f(x: List[int]):\n    return len(x) >= 7 and set(x) == {1}",
            KILL_EVERY_PEER,
            "fail" if world == "user" else "pass",
        ),
        ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
        # the supervisor is not dumpable: its pipes cannot be reopened through /proc to forge a verdict
        ("def f(x: int):\n    return x == 0", FORGE_THROUGH_PROC, "pass"),
        # nor can a signal reach it by fd ownership
        ("def f(x: int):\n    return x == 4", SIGNAL_BY_FD_OWNER, "error"),
        ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
    ]
    if world == "user":  # one process per program: its threads counted apart from the machine's (its uid's tasks
        # in its user namespace are the launcher's, the warden's and the zygote's, whatever else runs as 65534), no
        # fork, and its CPU time the clock: a sleeper stops at the sleepers' guard
        cases += [
            (
                "def f(x: List[int]):\n    return x == [35, 31]",
                "import resource, threading\ndef g():\n    n, stop = 0, threading.Event()\n"
                "    threading.stack_size(1 << 16)  # (each thread's stack counts in the program's address space)\n"
                "    for _ in range(40):\n"
                "        try:\n            threading.Thread(target=stop.wait).start()\n"
                "            n += 1\n        except RuntimeError:\n            break\n"
                "    return [resource.getrlimit(resource.RLIMIT_NPROC)[0], n]",
                "pass",
            ),
            ("def f(x: int):\n    return x == 1", FORK_ERRNO, "pass"),
            ("def f(x):\n    return x == 5", "import time\ndef g():\n    time.sleep(30)", "timeout"),
            ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
        ]
    held: list[str] = []
    try:
        result = subprocess.run(
            _unprivileged_command(held),
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "SCRIPT": UNPRIVILEGED, "ARGUMENT": json.dumps([cases, world])},
        )
    finally:
        for directory in held:
            os.rmdir(directory)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["uid"] == 65534
    if world == "user":  # what training needs: the same level as root's
        assert report["level"] == "full", report["isolation"]
        assert report["isolation"].startswith("namespaces (a user namespace of its own, no root needed)")
        assert "one process per program" in report["isolation"] and "the clock: CPU time" in report["isolation"]
        assert report["seconds"][-2] < 4.0  # the sleeper, stopped at its guard
    else:
        assert report["level"] == "basic"
        assert report["isolation"].startswith("basic (no namespaces)") and "rlimits only" in report["isolation"]
    assert report["statuses"] == [status for _, _, status in cases], report["details"]
    assert [entry for entry in process_table().values() if mark.encode() in entry[2] and entry[1] != "Z"] == []
