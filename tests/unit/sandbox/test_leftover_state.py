"""Process and kernel state a program leaves behind (limits, signal handlers, timers, the time zone,
/tmp, /dev/shm): a probe that runs next sees a clean sandbox."""

from __future__ import annotations

import pytest
from sandbox_support import (
    ORDINARY_PROGRAMS,
    STOP_THE_JUDGE,
    check_ordinary,
    program,
    wrong,
)

from codeplay_lightning.execution import Program

# ---------------------------------------------------------------- state a program leaves behind


STATE_PROBE_G = """
    import decimal, gc, os, resource, signal, sys, time, tracemalloc, typing
    def g():
        limits = [list(resource.getrlimit(getattr(resource, name)))
                  for name in ("RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_STACK", "RLIMIT_FSIZE", "RLIMIT_CPU")]
        with open("big", "wb") as big:  # /tmp is not left full
            big.write(b"x" * (8 << 20))
        os.remove("big")
        handlers = [str(signal.getsignal(number)) for number in (signal.SIGALRM, signal.SIGTERM, signal.SIGUSR1)]
        time.sleep(0.05)  # a timer left armed would fire here
        try:
            nice = os.nice(0)
        except PermissionError:  # (getpriority is off the allowlist)
            nice = "refused"
        return [limits, handlers, signal.set_wakeup_fd(-1), os.environ.get("TZ", ""), time.tzname[0], nice,
                sorted(os.sched_getaffinity(0)), tracemalloc.is_tracing(), gc.isenabled(), list(gc.get_threshold()),
                decimal.getcontext().prec, str(decimal.DefaultContext.rounding), str(typing.List[int]),
                sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else [], sys.getrecursionlimit()]
"""


@pytest.fixture(scope="module")
def probe_answer(solo):
    """What the probe sees in a clean sandbox."""
    (verdict,) = solo.verify([program("def f(x):\n    print(repr(x))\n    return False", STATE_PROBE_G)])
    assert verdict.status == "fail", verdict
    return verdict.output.strip()


STATE_CHANGES = {
    "rlimit_as": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_AS, (200 << 20, 200 << 20))\n"
    "    return 4",
    "rlimit_nofile": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_NOFILE, (8, 8))\n    return 4",
    "rlimit_stack": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_STACK, (1 << 16, 1 << 16))\n"
    "    return 4",
    "rlimit_fsize": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))\n    return 4",
    "rlimit_cpu": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_CPU, (1, 1))\n    return 4",
    "seccomp_strict": "import ctypes\ndef g():\n    ctypes.CDLL(None).prctl(22, 1, 0, 0, 0)\n    return 4",
    "signal_handlers": "import signal\ndef g():\n    for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGUSR1):\n"
    "        signal.signal(s, signal.SIG_IGN)\n    return 4",
    "armed_timer": "import signal\ndef g():\n    signal.setitimer(signal.ITIMER_REAL, 0.01)\n    return 4",
    "wakeup_fd_async": "import fcntl, os, signal\ndef g():\n    r, w = os.pipe()\n    os.set_blocking(w, False)\n"
    "    signal.set_wakeup_fd(w)\n    fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC)\n    return 4",
    "timezone": "import os, time\ndef g():\n    os.environ['TZ'] = 'Asia/Kolkata'\n    time.tzset()\n    return 4",
    "nice": "import os\ndef g():\n    os.nice(19)\n    return 4",
    "affinity": "import os\ndef g():\n    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n    return 4",
    "tracemalloc": "import tracemalloc\ndef g():\n    tracemalloc.start()\n    return 4",
    "gc_flags": "import gc\ndef g():\n    gc.disable()\n    gc.set_threshold(1, 1, 1)\n    return 4",
    "decimal_default": "import decimal\ndef g():\n    decimal.DefaultContext.prec = 3\n"
    "    decimal.DefaultContext.rounding = decimal.ROUND_DOWN\n    return 4",
    "typing_internals": "import typing\ndef g():\n    typing._cleanups.clear()\n    typing.List._name = 'Hacked'\n"
    "    return 4",
    "fills_tmp": "def g():\n    with open('/tmp/fill', 'wb') as fill:\n        try:\n            while True:\n"
    "                fill.write(b'x' * (1 << 20))\n        except OSError:\n            pass\n"
    "    return 4",
    "posix_timer": "import ctypes, signal\ndef g():\n    libc = ctypes.CDLL(None)\n    timer = ctypes.c_void_p()\n"
    "    libc.timer_create(1, None, ctypes.byref(timer))\n    return 4",
    "recursion_limit": "import sys\ndef g():\n    sys.setrecursionlimit(50)\n    return 4",
    "dev_shm": "import os\ndef g():\n    open('/dev/shm/planted', 'w').close()\n    return 4",
}


@pytest.mark.parametrize("g", STATE_CHANGES.values(), ids=STATE_CHANGES.keys())
def test_state_changes_do_not_reach_later_programs(solo, probe_answer, g):
    probe = program(f"def f(x):\n    return repr(x) == {probe_answer!r}", STATE_PROBE_G)
    verdicts = solo.verify([wrong(g), probe, *ORDINARY_PROGRAMS])
    assert verdicts[0].status != "pass"
    assert verdicts[1].status == "pass", (verdicts[1], probe_answer)
    check_ordinary(verdicts[2:])


def test_a_runner_cannot_stop_its_puzzles_judge_for_the_next_program(solo):
    f = "def f(x: int) -> bool:\n    return x == 5"
    right = Program(f, "def g():\n    return 5\n")
    verdicts = solo.verify([right, Program(f, STOP_THE_JUDGE), right, right])
    assert [v.status for v in verdicts] == ["pass", "error", "pass", "pass"], verdicts
