"""Programs that never answer or take the process down: infinite loops (on a sandbox with a 0.5 s
timeout), memory exhaustion, deep recursion, crashes and exits."""

from __future__ import annotations

import time

import pytest
from sandbox_support import (
    FAST,
    SIGNAL_PROOF,
    contained,
    program,
    wrong,
)

from codeplay_lightning.execution.warden.protocol import sleeper_guard

# ---------------------------------------------------------------- infinite loops


@pytest.mark.parametrize(
    "hostile",
    [
        wrong("def g():\n    while True:\n        pass"),
        program("def f(x):\n    while True:\n        pass", "def g():\n    return 1"),
        wrong(SIGNAL_PROOF),
        wrong("""
        def g():
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    pass
        """),
        wrong("import itertools\ndef g():\n    return sum(itertools.count())"),  # never leaves C code
    ],
    ids=["loop_in_g", "loop_in_f", "signals_blocked_and_ignored", "catches_everything", "c_level_loop"],
)
def test_infinite_loops_time_out(fast, hostile):
    started = time.monotonic()
    (verdict,) = contained(fast, hostile)
    assert verdict.status == "timeout", verdict
    assert verdict.seconds == pytest.approx(FAST, abs=0.1)
    assert time.monotonic() - started < FAST + 3.0


@pytest.mark.parametrize(
    "g",
    [
        "import time\ndef g():\n    time.sleep(1000)",
        "import threading\ndef g():\n    threading.Event().wait()",
        "import os\ndef g():\n    return os.read(3, 1)",  # its request pipe: read already, never written again
    ],
    ids=["sleep", "waits_for_an_event", "blocks_on_a_pipe"],
)
def test_a_program_that_waits_forever_times_out_at_the_wall_guard(fast, g):
    """A program that uses no CPU meets the sleepers' wall-clock guard (where the clock is CPU time) or the limit."""
    started = time.monotonic()
    (verdict,) = contained(fast, wrong(g))
    assert verdict.status == "timeout", verdict
    assert time.monotonic() - started < sleeper_guard(FAST) + 3.0


# ---------------------------------------------------------------- memory, recursion, crashes


@pytest.mark.parametrize(
    "hostile",
    [
        wrong("def g():\n    return [0] * (1 << 40)"),
        wrong("def g():\n    return 'x' * (1 << 40)"),
        wrong("def g():\n    blocks = []\n    while True:\n        blocks.append(bytearray(1 << 24))"),
        wrong("def g():\n    blocks = []\n    while True:\n        blocks.append([None] * (1 << 20))"),
        program("def f(x):\n    return len(x * (1 << 40)) > 0", "def g():\n    return 'ab'"),
    ],
    ids=["huge_list", "huge_string", "growing_buffers", "growing_lists", "in_f"],
)
def test_memory_exhaustion(solo, hostile):
    (verdict,) = contained(solo, hostile)
    assert verdict.status == "memory", verdict


def test_deep_recursion_is_an_error(mixed):
    (verdict,) = contained(mixed, wrong("def g():\n    def down(n):\n        return down(n + 1)\n    return down(0)"))
    assert verdict.status == "error"
    assert "RecursionError" in verdict.detail


@pytest.mark.parametrize(
    "hostile, signal_name",
    [
        (wrong("import ctypes\ndef g():\n    return ctypes.string_at(0)"), "SIGSEGV"),
        (
            wrong("""
        import sys
        def g():
            sys.setrecursionlimit(10 ** 8)
            class Deep:
                def __repr__(self):
                    return repr(self)  # every level goes through C: the C stack overflows
            return repr(Deep())
        """),
            "SIGSEGV",
        ),
        # SIGABRT, or SIGSEGV when abort() finds its signal dropped (the worker is PID 1 of its namespace)
        (wrong("import os\ndef g():\n    os.abort()"), ("SIGABRT", "SIGSEGV")),
        (wrong("import os, signal\ndef g():\n    signal.raise_signal(signal.SIGBUS)"), None),  # dropped for PID 1
    ],
    ids=["null_pointer", "c_stack_overflow", "abort", "raise_sigbus"],
)
def test_crashes(mixed, hostile, signal_name):
    (verdict,) = contained(mixed, hostile)
    assert verdict.status != "pass"
    assert verdict.status in (("error", "timeout") if signal_name else ("error", "timeout", "fail")), verdict
    if signal_name and verdict.status == "error":
        assert "g's process ended without an answer" in verdict.detail
        assert any(name in verdict.detail for name in ([signal_name] if isinstance(signal_name, str) else signal_name))


# ---------------------------------------------------------------- exits


@pytest.mark.parametrize(
    "g, fragment",
    [
        ("def g():\n    exit()", ""),
        ("def g():\n    quit(3)", ""),
        ("import sys\ndef g():\n    sys.exit(0)", "SystemExit"),
        ("def g():\n    raise SystemExit", "SystemExit"),
        ("def g():\n    raise KeyboardInterrupt", "KeyboardInterrupt"),
        ("def g():\n    raise GeneratorExit", "GeneratorExit"),
        ("import os\ndef g():\n    os._exit(0)", "exit code 0"),
        ("import os\ndef g():\n    os._exit(1)", "exit code 1"),
    ],
)
def test_exits_are_errors(mixed, g, fragment):
    (verdict,) = contained(mixed, program("def f(x):\n    return True", g))  # f would pass anything
    assert verdict.status == "error", verdict
    assert fragment in verdict.detail


def test_a_program_kept_from_a_core_by_load_keeps_its_verdict_and_a_sleeper_does_not_wait_long(monkeypatch):
    """The warden's clock, on a fake wall and a fake CPU counter: a program that computes at a third of a core (a
    loaded machine) runs on past the sleepers' guard until its CPU limit; one at a tenth of a core is a sleeper
    there."""
    from codeplay_lightning.execution.warden import clock as warden

    now, cpu = [0.0], [0.0]
    monkeypatch.setattr(warden.time, "monotonic", lambda: now[0])

    def run(core_share: float) -> float:
        now[0] = cpu[0] = 0.0
        clock = warden.Clock(1.0, cpu=lambda: cpu[0])
        while not clock.expired():
            now[0] += 0.01
            cpu[0] += 0.01 * core_share
        return now[0]

    assert run(1 / 3) == pytest.approx(3.0, abs=0.02) and cpu[0] == pytest.approx(1.0, abs=0.01)  # its CPU limit
    assert run(0.1) == pytest.approx(sleeper_guard(1.0), abs=0.02)  # mostly sleeping
    assert run(0.0) == pytest.approx(sleeper_guard(1.0), abs=0.02)
