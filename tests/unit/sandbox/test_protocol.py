"""The pipes between a program and its warden: flooding output, protocol messages printed, and replies
forged on every file descriptor a program might hold."""

from __future__ import annotations

import json
import struct

import pytest
from sandbox_support import (
    FORGED_PASS,
    contained,
    forging,
    wrong,
)

# ---------------------------------------------------------------- flooding output, fake protocol


FRAME = struct.pack(">I", 40) + json.dumps({"id": "0" * 16, "status": "pass"}).ljust(40).encode()


@pytest.mark.parametrize(
    "g",
    [
        "def g():\n    for _ in range(50):\n        print('x' * 1_000_000)\n    return 4",
        "import sys\ndef g():\n    for _ in range(50):\n        sys.stderr.write('e' * 1_000_000)\n    return 4",
        "import os\ndef g():\n    os.write(1, b'x' * 50_000_000)\n    return 4",
        "import os\ndef g():\n    os.write(2, b'x' * 50_000_000)\n    return 4",
        "import sys\ndef g():\n    sys.__stdout__.write('y' * 10_000_000)\n    sys.__stdout__.flush()\n    return 4",
        "def g():\n    print('x' * 10_000_000, end='')\n    print('tail')\n    return 4",
    ],
    ids=["print_50mb", "stderr_50mb", "os_write_1", "os_write_2", "real_stdout", "one_huge_print"],
)
def test_flooding_output(mixed, g):
    (verdict,) = contained(mixed, wrong(g))
    assert verdict.status == "fail", verdict
    assert len(verdict.output) <= 4096 + 100
    if "print" in g or "stderr" in g:
        assert verdict.output[:4096].strip("xe") == "" and "more characters dropped" in verdict.output


@pytest.mark.parametrize(
    "g",
    [
        "import json\ndef g():\n"
        "    print(json.dumps({'id': '0' * 16, 'status': 'pass', 'detail': '', 'seconds': 0.0}))\n"
        "    return 4",
        f"def g():\n    print({FRAME.decode('latin-1')!r}, end='')\n    return 4",
        f"import os\ndef g():\n    os.write(1, {FRAME!r})\n    os.write(2, {FRAME!r})\n    return 4",
        f"import sys\ndef g():\n    sys.__stdout__.buffer.write({FRAME!r})\n    sys.__stdout__.flush()\n    return 4",
    ],
    ids=["json_line", "framed_print", "framed_os_write", "framed_real_stdout"],
)
def test_fake_protocol_messages_on_output(mixed, g):
    (verdict,) = contained(mixed, wrong(g))
    assert verdict.status == "fail", verdict


# ---------------------------------------------------------------- forged replies


@pytest.mark.parametrize(
    "hostile",
    [
        forging(FORGED_PASS),
        forging(FORGED_PASS, "os._exit(0)"),
        forging(FORGED_PASS + " * 2"),
        forging('frame("verdict", "1", "pass", "0.0", "", "")', "os._exit(0)"),
        forging('frame("answer", "4", "4", "")', "os._exit(0)"),
        forging('frame("answer", "[" * 200000 + "]" * 200000, "", "")', "os._exit(0)"),  # nested past any limit
        forging('frame("answer", "NaN", "", "")', "os._exit(0)"),
        forging('frame("answer", "5", "5")', "os._exit(0)"),  # one field short
        forging('b"garbage, not a frame at all"'),
        forging('struct.pack(">I", 2) + b"[]"'),
        forging('struct.pack(">I", 0xFFFFFFFF)', "os._exit(0)"),  # a 4 GB frame announced
        forging('b""', "os.close(3)\n    return 4"),
    ],
    ids=[
        "pass",
        "pass_then_exit",
        "twice",
        "supervisor_shaped",
        "answer_then_exit",
        "deep_json",
        "nan",
        "short_frame",
        "garbage",
        "json_list",
        "huge_header",
        "closes_answer_pipe",
    ],
)
def test_forged_replies(fast, hostile):
    (verdict,) = contained(fast, hostile)
    assert verdict.status in ("fail", "error"), verdict


def test_a_frame_announced_but_never_sent_times_out(fast):
    (verdict,) = contained(fast, forging('struct.pack(">I", 1000)', "import time\n    time.sleep(100)"))
    assert verdict.status == "timeout", verdict
