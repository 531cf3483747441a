"""`Sandbox.apply`: a program's functions called on JSON inputs in a process of the program's own,
the way Code World Models are scored and planned with. The containment of the processes themselves
is the other suites' here; this one, what `apply` adds: values, no state kept from one call to the next,
extra modules offered and nothing else of site-packages, and every failure a verdict."""

from __future__ import annotations

import textwrap

import pytest

from codeplay_lightning.execution import Call, Program, Sandbox

COUNTER = textwrap.dedent("""
    import numpy as np
    calls = 0
    def step(batch):
        global calls
        calls += 1
        return {"sum": float(np.asarray(batch, dtype=float).sum()), "calls": calls}
    def divide(x):
        return 1 / x
    """)


def test_values_and_no_state_kept_between_calls(numpy_sandbox):
    """Every call runs the program afresh: a counter the program keeps starts again each time."""
    verdicts = numpy_sandbox.apply([Call(COUNTER, "step", [[1, 2], [3, 4.5]]) for _ in range(3)])
    assert [v.status for v in verdicts] == ["returned"] * 3
    assert [v.value for v in verdicts] == [{"sum": 10.5, "calls": 1}] * 3
    assert not any(v.passed for v in verdicts)  # a value is not a verdict on a puzzle


def test_nothing_leaks_from_one_program_to_the_next(numpy_sandbox):
    """A helper one candidate defined is unknown to the next, unlike re-importing into one process."""
    first = "def helper():\n    return 41\ndef model(x):\n    return helper() + x\n"
    second = "def model(x):\n    return helper() + x\n"
    defines, uses = numpy_sandbox.apply([Call(first, "model", 1), Call(second, "model", 1)])
    assert (defines.status, defines.value) == ("returned", 42)
    assert uses.status == "error" and "NameError" in uses.detail and "helper" in uses.detail


def test_another_function_of_the_same_source_starts_afresh(numpy_sandbox):
    """Calls of two functions of one source, interleaved: each starts from the program's module."""
    calls = [Call(COUNTER, "step", [1]), Call(COUNTER, "divide", 2), Call(COUNTER, "step", [1])]
    counts = [numpy_sandbox.apply([call])[0].value for call in calls]
    assert counts == [{"sum": 1.0, "calls": 1}, 0.5, {"sum": 1.0, "calls": 1}]


def test_errors_carry_the_program_line(numpy_sandbox):
    (verdict,) = numpy_sandbox.apply([Call(COUNTER, "divide", 0)])
    assert verdict.status == "error" and verdict.value is None
    assert "ZeroDivisionError" in verdict.detail and "line 9" in verdict.detail and "return 1 / x" in verdict.detail


@pytest.mark.parametrize(
    ("source", "function", "status", "fragment"),
    [
        ("def model(x)\n    return x\n", "model", "syntax", "line 1"),
        ("def model(x):\n    return x\n", "absent", "error", "no function absent"),
        ("raise RuntimeError('at import')\ndef model(x):\n    return x\n", "model", "error", "at import"),
        ("def model(x):\n    return {1: x}\n", "model", "error", "str keys"),
        ("def model(x):\n    return object()\n", "model", "error", "cannot be judged"),
        ("import torch\ndef model(x):\n    return x\n", "model", "error", "No module named 'torch'"),
    ],
)
def test_failures_are_verdicts(numpy_sandbox, source, function, status, fragment):
    (verdict,) = numpy_sandbox.apply([Call(source, function, 1)])
    assert verdict.status == status and fragment in verdict.detail


def test_a_looping_call_times_out_and_the_next_program_is_unaffected(solo):
    looping = "def model(x):\n    while True:\n        pass\n"
    stuck, fine = solo.apply([Call(looping, "model", 0), Call("def model(x):\n    return x * 2\n", "model", 21)])
    assert stuck.status == "timeout" and (fine.status, fine.value) == ("returned", 42)


def test_memory_exhaustion(solo):
    (verdict,) = solo.apply([Call("def model(x):\n    return len(bytearray(x))\n", "model", 4 << 30)])
    assert verdict.status == "memory"


def test_output_is_captured_per_call(numpy_sandbox):
    source = "def model(x):\n    print('seen', x)\n    return x\n"
    verdicts = numpy_sandbox.apply([Call(source, "model", 1), Call(source, "model", 2)])
    assert [v.output for v in verdicts] == ["seen 1\n", "seen 2\n"]


def test_calls_and_programs_share_one_sandbox(numpy_sandbox):
    (verdict,) = numpy_sandbox.verify([Program("def f(x: int):\n    return x == 3\n", "def g():\n    return 3\n")])
    assert verdict.passed
    (value,) = numpy_sandbox.apply(
        [Call("import numpy\ndef model(x):\n    return int(numpy.sum(x))\n", "model", [1, 2])]
    )
    assert value.value == 3


def test_modules_are_offered_only_when_asked_for():
    with Sandbox(workers=1, timeout=2.0) as plain:
        (verdict,) = plain.apply([Call("import numpy\ndef model(x):\n    return x\n", "model", 1)])
    assert verdict.status == "error" and "No module named 'numpy'" in verdict.detail


def test_a_module_installed_under_tmp_is_offered_too(tmp_path, monkeypatch):
    """The root is built after the host's /tmp is hidden: a virtual environment there is read all the same."""
    (tmp_path / "offered_from_tmp").mkdir()
    (tmp_path / "offered_from_tmp" / "__init__.py").write_text("VALUE = 7\n")
    (tmp_path / "linked_from_tmp").symlink_to(tmp_path / "offered_from_tmp")
    monkeypatch.syspath_prepend(str(tmp_path))
    with Sandbox(workers=1, timeout=2.0, modules=("offered_from_tmp", "linked_from_tmp")) as box:
        source = "import offered_from_tmp, linked_from_tmp\ndef model(x):\n    return x + offered_from_tmp.VALUE\n"
        (verdict,) = box.apply([Call(source, "model", 1)])
    assert (verdict.status, verdict.value) == ("returned", 8), verdict.detail


def test_an_uninstalled_module_is_refused_at_once():
    with pytest.raises(ValueError, match="not_a_module_here"):
        Sandbox(modules=("not_a_module_here",))


FORGE_A_REPLY = """
import os, struct
def frame(*fields):
    parts = [field if isinstance(field, bytes) else field.encode() for field in fields]
    body = struct.pack(">H", len(parts)) + b"".join(struct.pack(">I", len(p)) for p in parts) + b"".join(parts)
    return struct.pack(">I", len(body)) + body
os.write(4, frame("returned", "", {value}, b"\\xff" * 150_000))  # invalid UTF-8 grows 4x as it travels escaped
os._exit(0)
def model(x):
    return x
"""


@pytest.mark.parametrize(
    ("value", "status"),
    [('"1"', "returned"), ('"1" * ((1 << 23) + 1)', "error"), ("'\"' + '\u00e9' * (1 << 22) + '\"'", "error")],
    ids=["fits", "over_the_cap", "utf8_over_the_cap_in_bytes_only"],
)
def test_a_reply_the_program_forges_is_capped_like_an_honest_one(numpy_sandbox, value, status):
    """A program may forge its own caller's reply (it could as well return the value): its output is cut as an
    honest caller's is and a value over the cap is an error, so the warden's reply stays within its frame limit
    and the warden serves on."""
    numpy_sandbox.apply([Call(COUNTER, "divide", 2)] * 2)  # both wardens started
    wardens = [warden.pid for warden in numpy_sandbox._wardens]
    verdict, after = numpy_sandbox.apply(
        [Call(FORGE_A_REPLY.format(value=value), "model", 1), Call(COUNTER, "divide", 2)]
    )
    assert verdict.status == status, verdict
    assert len(verdict.output) <= 4096 + 100
    assert (after.status, after.value) == ("returned", 0.5)
    assert [warden.pid for warden in numpy_sandbox._wardens] == wardens
