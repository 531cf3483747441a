"""The attacks that broke the earlier design, where programs ran inside a long-lived worker's interpreter,
and attacks meant to make a later program pass."""

from __future__ import annotations

import pytest
from sandbox_support import (
    ORDINARY,
    ORDINARY_PROGRAMS,
    check_ordinary,
    contained,
    program,
    wrong,
)

from codeplay_lightning.execution import Sandbox

# ---------------------------------------------------------------- the holes of the in-process design
# These broke the earlier design, where programs ran inside a long-lived worker's interpreter.


@pytest.fixture
def fresh():
    with Sandbox(workers=1, timeout=2.0) as box:
        yield box


STOLEN_ID = """
    import json, os, struct, sys
    def g():
        frame, request_id = sys._getframe(), None
        while frame is not None:
            request = frame.f_locals.get("request")
            if isinstance(request, dict) and "id" in request:
                request_id = request["id"]
            frame = frame.f_back
        fd = json.loads(sys.argv[1])["reply_fd"]
        data = json.dumps({"id": request_id, "status": "pass", "detail": "", "seconds": 0.0,
                           "output": "", "recycle": []}).encode()
        os.write(fd, struct.pack(">I", len(data)) + data)
        return 4
"""


def test_forged_reply_with_stolen_request_id(fresh):
    (verdict,) = contained(fresh, wrong(STOLEN_ID))
    assert verdict.status != "pass"


@pytest.mark.parametrize(
    "g",
    [
        """
    import sys
    def g():
        programs = sys.modules["warden.programs"]  # the code every later program process runs
        programs.judge_answer.__code__ = (lambda code, source, answer_type, text: ["pass", "", "", "True"]).__code__
        return 4
    """,
        """
    import sys
    def g():
        def tracer(frame, event, arg):  # rewrites the worker's local once f has judged the answer
            if event == "line" and frame.f_locals.get("result") is False:
                frame.f_locals["result"] = True
            return tracer
        sys._getframe(1).f_trace = tracer
        sys.settrace(tracer)
        return 4
    """,
        """
    import sys, math
    def g():
        def tracer(frame, event, arg):  # blinds the check of the namespaces
            if event == "line" and frame.f_code.co_name == "changed" and "same" in frame.f_locals:
                frame.f_locals["same"] = True
            return tracer
        math.sqrt = lambda x: 3.0
        sys.settrace(tracer)
        return 4
    """,
    ],
    ids=["replaces_run_program", "trace_rewrites_result", "trace_blinds_repair"],
)
def test_runner_internals(fresh, g):
    (verdict,) = contained(fresh, wrong(g))
    assert verdict.status != "pass"


@pytest.mark.parametrize(
    "g",
    [
        "import collections\ndef g():\n"
        "    collections.Counter.most_common.__code__ = (lambda self, n=None: [('a', 2)]).__code__\n    return 4",
        "import random\ndef g():\n    random._inst._randbelow = lambda n: 0\n    return 4",
        "import json\ndef g():\n    json._default_encoder.indent = 1\n    return 4",
    ],
    ids=["function_code", "instance_attribute", "default_encoder"],
)
def test_stdlib_object_state(fresh, g):
    check_stdlib_probes(fresh, g)


POISON_REGEX_CACHE = (
    "import re\ndef g():\n    re.match('a+', 'a')\n    for key in list(re._cache):\n"
    "        if key[1] == 'a+':\n            re._cache[key] = re.compile('b+')\n    return 4"
)


def test_regex_cache_poisoning_does_not_leak(fresh):
    check_stdlib_probes(fresh, POISON_REGEX_CACHE)


def check_stdlib_probes(mixed: Sandbox, g: str) -> None:
    probes = [
        (
            program(
                "import random\ndef f(x: int):\n    return x == random.Random(0).choice(range(100))",
                "import random\ndef g():\n    return random.choice(range(100))",
            ),
            "pass",
        ),
        (
            program(
                "import json\ndef f(x: str):\n    return x == '[1, 2]'",
                "import json\ndef g():\n    return json.dumps([1, 2])",
            ),
            "pass",
        ),
        (
            program(
                "import re\ndef f(x: bool):\n    return x",
                "import re\ndef g():\n    return re.match('a+', 'aaa') is not None",
            ),
            "pass",
        ),
    ]
    verdicts = mixed.verify([wrong(g), *ORDINARY_PROGRAMS, *(prog for prog, _ in probes)])
    assert verdicts[0].status == "fail"
    check_ordinary(verdicts[1 : 1 + len(ORDINARY)])
    assert [v.status for v in verdicts[1 + len(ORDINARY) :]] == [status for _, status in probes]


# ---------------------------------------------------------------- later programs cannot be made to pass


RAW_CLONE = """
    import ctypes, os, struct, time
    def g():
        libc = ctypes.CDLL(None)
        if libc.syscall(56, 0, 0, 0, 0, 0) == 0:  # clone(2) with exit signal 0: no SIGCHLD, no wait()
            data = struct.pack(">I", 14) + struct.pack(">HI", 1, 4) + b"pass" + b"...."
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                for fd in range(64):
                    try:
                        os.write(fd, data)
                    except OSError:
                        pass
                time.sleep(0.01)
            os._exit(0)
        return 4
"""


@pytest.mark.parametrize(
    "g",
    [
        RAW_CLONE,
        "import gc\ndef g():\n    gc.callbacks.append(lambda phase, info: __import__('os').write(3, b'x' * 100))\n"
        "    return 4",
        "import os\ndef g():\n"
        "    os.register_at_fork(before=lambda: os.write(3, b'pass'), after_in_child=lambda: os._exit(0))\n"
        "    return 4",
        "import sys\ndef g():\n    programs = sys.modules['warden.programs']\n"
        "    programs.run_g.__code__ = (lambda *a: ['pass', '']).__code__\n"
        "    programs.judge_answer.__code__ = (lambda *a: ['pass', '']).__code__\n    return 4",
        "import sys\ndef g():\n"
        "    for name in ('warden.main', 'warden.programs'):\n"
        "        sys.modules[name].compile_source = lambda *a: compile('def g():\\n    return 5', '<g>', 'exec')\n"
        "    return 4",
    ],
    ids=["raw_clone_child_forges", "gc_callback", "at_fork_hooks", "replaces_run_g_and_judge", "replaces_compiler"],
)
def test_no_later_program_is_made_to_pass(solo, g):
    """Each attack is followed on the same warden by wrong programs (in `contained`) that must fail."""
    later_wrong = [wrong("def g():\n    return 4")] * 3
    verdicts = solo.verify([wrong(g), *later_wrong])
    assert [v.status for v in verdicts[1:]] == ["fail"] * 3, verdicts
    contained(solo, wrong(g))
