"""What the supervisor trusts of its wardens: nothing. A fake warden's malformed replies, death or silence are the
sandbox's own faults (JUDGE_ERROR, once a fresh warden failed too), never the program's, and a warden that stops
reading cannot block the caller."""

from __future__ import annotations

import time

import pytest
from sandbox_support import (
    ORDINARY_PROGRAMS,
    program,
)

from codeplay_lightning.execution import JUDGE_ERROR, Sandbox
from codeplay_lightning.execution.sandbox import REPLY_SLACK
from codeplay_lightning.execution.warden.protocol import wall_guard

# ---------------------------------------------------------------- a hostile warden cannot take the caller down


HOSTILE_WARDEN = """
write_all(replies, pack("ready", "full", "namespaces: none, a fake warden", ""))
while True:
    request = read_frame(requests, 1 << 31) if {reads} else time.sleep(1000)
    if request is None:
        break
    sequence = request[1]
    write_all(replies, {reply})
"""

NESTED = 'b"[" * 100000 + b"]" * 100000'
HOSTILE_REPLIES = {
    "nested_json": f"struct.pack('>I', 200000) + {NESTED}",
    "seconds_soon": 'pack("verdict", sequence, "pass", "soon", "", "", "", "")',
    "seconds_nan": 'pack("verdict", sequence, "pass", "nan", "", "", "", "")',
    "seconds_negative": 'pack("verdict", sequence, "pass", "-1", "", "", "", "")',
    "unknown_status": 'pack("verdict", sequence, "passed", "0.1", "", "", "", "")',
    "wrong_sequence": 'pack("verdict", "999", "pass", "0.1", "", "", "", "")',
    "four_gigabytes": "struct.pack('>I', 0xFFFFFFFF) + b'x' * 100000",
    "fatal_after_ready": 'pack("fatal", "boom")',
    "too_many_fields": 'pack("verdict", sequence, "pass", "0.1", "", "", "", "", "extra")',
    "field_sizes_lie": "struct.pack('>I', 10) + struct.pack('>H', 3) + b'\\xff' * 8",
    "a_value_for_a_program": 'pack("returned", sequence, "returned", "0.1", "", "", "true")',
}


@pytest.mark.parametrize("reply", HOSTILE_REPLIES.values(), ids=HOSTILE_REPLIES.keys())
def test_hostile_warden_replies_are_the_judges_faults(fake_warden, reply):
    fake_warden(HOSTILE_WARDEN.format(reads=True, reply=reply))
    with Sandbox(workers=1, timeout=0.5) as box:
        started = time.monotonic()
        verdicts = box.verify(ORDINARY_PROGRAMS[:2])
        assert [v.status for v in verdicts] == [JUDGE_ERROR, JUDGE_ERROR], verdicts
        assert all(v.judge_fault and not v.passed and "sandbox lost this program" in v.detail for v in verdicts)
        assert time.monotonic() - started < 20


def test_a_warden_that_stops_reading_cannot_block_the_caller(fake_warden):
    fake_warden(HOSTILE_WARDEN.format(reads=False, reply="b''"))
    huge = program("def f(x):\n    return True", "def g():\n    return " + repr("x" * (1 << 19)))  # past a pipe buffer
    with Sandbox(workers=1, timeout=0.5) as box:
        started = time.monotonic()
        (verdict,) = box.verify([huge])
        assert verdict.judge_fault and "stopped answering" in verdict.detail, verdict
        assert time.monotonic() - started < 2 * (wall_guard(0.5) + REPLY_SLACK) + 3  # the program and its retry


DYING_WARDEN = """
import signal
write_all(replies, pack("ready", "full", "namespaces: none, a fake warden", ""))
request = read_frame(requests, 1 << 31)
if {dies}:
    os.kill(os.getpid(), signal.SIGKILL)
write_all(replies, pack("verdict", request[1], "pass", "0.1", "", "", "", ""))
"""


@pytest.mark.parametrize(
    "dies", ["True", "os.path.exists(marker) or open(marker, 'w').close()"], ids=["always", "once"]
)
def test_a_warden_that_dies_is_replaced_and_its_program_retried_once(fake_warden, tmp_path, dies):
    """Killed mid-program, the warden is replaced and the program runs again: its own verdict if the fresh warden
    gives one, else JUDGE_ERROR."""
    fake_warden(f"marker = {str(tmp_path / 'died')!r}\n" + DYING_WARDEN.format(dies=dies))
    with Sandbox(workers=1, timeout=0.5) as box:
        (verdict,) = box.verify(ORDINARY_PROGRAMS[:1])
    if dies == "True":
        assert verdict.status == JUDGE_ERROR and "its warden exited" in verdict.detail, verdict
    else:
        assert verdict.passed and not verdict.judge_fault, verdict
