"""Processes and threads a program starts: the kills it sends, the children and daemons it leaves and
the threads that outlive it reach neither the caller nor a later program."""

from __future__ import annotations

import pytest
from sandbox_support import (
    contained,
    marker,
    program,
    wrong,
)

# ---------------------------------------------------------------- killing


@pytest.mark.parametrize(
    "g",
    [
        "import os, signal\ndef g():\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 4",
        "import os, signal\ndef g():\n    os.killpg(0, signal.SIGKILL)\n    return 4",
        "import os, signal\ndef g():\n    os.kill(0, signal.SIGKILL)\n    return 4",
        "import os, signal\ndef g():\n    os.kill(os.getpid(), signal.SIGKILL)\n    return 4",
        "import os, signal\ndef g():\n    os.kill(os.getpid(), signal.SIGSTOP)\n    return 4",
        "import os, signal\ndef g():\n    os.killpg(os.getpgid(os.getppid() or 1), signal.SIGTERM)\n    return 4",
    ],
    ids=["parent", "process_group", "pid_0", "itself", "stops_itself", "parent_group_sigterm"],
)
def test_kills(mixed, g):
    (verdict,) = contained(mixed, wrong(g))
    assert verdict.status in ("fail", "error", "timeout"), verdict


def test_kill_everything(namespaced):
    hostile = wrong(
        "import os, signal\ndef g():\n    try:\n        os.kill(-1, signal.SIGKILL)\n"
        "    except OSError:\n        pass\n    return 4"
    )
    verdicts = contained(namespaced, hostile, hostile)
    assert {v.status for v in verdicts} <= {"fail", "error"}


def test_kill_everything_and_pass(namespaced):
    (verdict,) = contained(
        namespaced,
        program(
            "def f(x):\n    return x == 4",
            "import os, signal\ndef g():\n    try:\n"
            "        os.kill(-1, signal.SIGKILL)\n    except OSError:\n"
            "        pass\n    return 4",
        ),
    )
    assert verdict.status in ("pass", "error")  # killing nothing is fine; killing itself is an error


# ---------------------------------------------------------------- processes outliving the program


def test_no_program_starts_another_program(mixed):
    """The root holds no executable and a program makes no pipe: subprocess fails, and leaves nothing."""
    (verdict,) = contained(
        mixed,
        program(
            "def f(x):\n    return x == 4",
            """
        import subprocess
        def g():
            subprocess.Popen(["sleep", "1000"])
            return 4
        """,
        ),
    )
    assert verdict.status == "error" and "Operation not permitted" in verdict.detail, verdict


def test_double_fork_daemon_does_not_outlive_the_program(mixed):
    (verdict,) = contained(
        mixed,
        wrong("""
        import os, time
        def g():
            if os.fork() == 0:
                try:
                    os.setsid()
                except PermissionError:  # denied where a new session is a new scheduler group
                    pass
                if os.fork() == 0:
                    while True:
                        time.sleep(0.01)
                os._exit(0)
            os.wait()
            return 4
        """),
    )
    assert verdict.status == "fail", verdict


def test_fork_that_keeps_running_the_worker(mixed):
    """The child returns from g too: two processes then compute and report the same verdict."""
    (verdict,) = contained(mixed, wrong("import os\ndef g():\n    os.fork()\n    return 4"))
    assert verdict.status in ("fail", "error"), verdict
    (verdict,) = contained(
        mixed, program("def f(x):\n    return x == 4", "import os\ndef g():\n    os.fork()\n    return 4")
    )
    assert verdict.status in ("pass", "error"), verdict


def test_many_processes(mixed):
    mark = marker()
    (verdict,) = contained(
        mixed,
        wrong(f"""
        import subprocess
        def g():
            for _ in range(20):
                try:
                    subprocess.Popen(["sleep", "{mark}"], start_new_session=True)
                except OSError:
                    break
            return 4
        """),
        marker=mark,
    )
    assert verdict.status in ("fail", "error"), verdict


# ---------------------------------------------------------------- threads


PATCHING_THREAD = """
    import builtins, threading, time
    def g():
        def patch():
            while True:
                builtins.len = lambda *args: 4
                time.sleep(0.001)
        threading.Thread(target=patch, daemon=True).start()
        time.sleep(0.005)
        return 4
"""


@pytest.mark.parametrize(
    "hostile",
    [
        wrong(PATCHING_THREAD),
        wrong(
            "import threading, time\ndef g():\n    threading.Thread(target=time.sleep, args=(100,)).start()\n"
            "    return 4"
        ),
        wrong("""
        import threading, time, math
        def g():
            def later():
                time.sleep(0.05)  # well after the program returned
                math.sqrt = lambda x: 3.0
            threading.Thread(target=later).start()
            return 4
        """),
    ],
    ids=["patches_len_every_ms", "sleeping_thread", "patches_after_return"],
)
def test_threads_that_outlive_the_program(solo, hostile):
    (verdict,) = contained(solo, hostile)
    assert verdict.status in ("fail", "error"), verdict
