"""The sandbox as an object: its isolation level, environment, determinism, a batch of every kind of
verdict, start and close, bad arguments, and an import path without torch."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sandbox_support import (
    FORGED_PASS,
    ORDINARY_PROGRAMS,
    REPO,
    SIGNAL_PROOF,
    assert_nothing_outlives,
    check_ordinary,
    contained,
    forging,
    program,
    wrong,
)

from codeplay_lightning.execution import Program, Sandbox, Verdict

SECRET_NAME = "CODEPLAY_TEST_API_KEY"
SECRET_VALUE = f"sk-secret-{uuid.uuid4().hex}"


def test_isolation_is_reported(mixed):
    assert mixed.isolation.startswith(("namespaces", "basic"))
    if os.geteuid() == 0:
        assert mixed.isolation.startswith("namespaces")


# ---------------------------------------------------------------- environment, determinism


def test_environment_secrets_are_invisible(monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    g = """
        import os
        def g():
            seen = [repr(dict(os.environ))]
            for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
                try:
                    with open(f"/proc/{entry}/environ", "rb") as environ:
                        seen.append(environ.read().decode("latin-1"))
                except OSError:
                    pass
            return "\\n".join(seen)
    """
    f = f"def f(x: str):\n    return 'PATH' in x and {SECRET_NAME!r} not in x and {SECRET_VALUE!r} not in x"
    with Sandbox(workers=1, timeout=2.0) as box:
        (verdict,) = contained(box, program(f, g))
        assert verdict.status == "pass", verdict
        (verdict,) = box.verify(
            [
                program(
                    "import os\ndef f(x: str):\n    return x == ''",
                    f"import os\ndef g():\n    return os.environ.get({SECRET_NAME!r}, '')",
                )
            ]
        )
        assert verdict.status == "pass", verdict


def test_determinism(mixed):
    expected = random.Random(0).random()
    draw = program(
        f"def f(x: float):\n    return x == {expected!r}", "import random\ndef g():\n    return random.random()"
    )
    reseed = program(
        "def f(x):\n    return True", "import random\ndef g():\n    random.seed(99)\n    random.random()\n    return 1"
    )
    verdicts = mixed.verify([draw, reseed, draw, reseed, draw, draw])
    assert [v.status for v in verdicts] == ["pass"] * 6, verdicts
    (again,) = mixed.verify([draw])
    assert again.status == "pass"
    hashed = program("def f(x: int):\n    return x", "def g():\n    return hash('codeplay') or 1")
    first, second = mixed.verify([hashed, hashed])
    (third,) = mixed.verify([hashed])
    assert first.status == "fail" and first.detail.startswith("f returned ")  # f returned the hash
    assert first.detail == second.detail == third.detail


def test_working_directory_exists_and_is_empty(mixed):
    verdicts = mixed.verify(
        [
            program(
                "def f(x: List[bool]):\n    return x == [True, True, True]",
                """
        import os
        def g():
            cwd = os.getcwd()
            return [os.path.isdir(cwd), os.listdir(cwd) == [], os.listdir(".") == []]
        """,
            )
        ]
        * 3
    )
    assert [v.status for v in verdicts] == ["pass"] * 3


# ---------------------------------------------------------------- queued work


def test_queued_work_is_not_lost(fast):
    ok = program("def f(x: int):\n    return x == 2", "import math\ndef g():\n    return int(math.sqrt(4))")
    no = program("def f(x: int):\n    return x == 3", "def g():\n    return 2")
    mix = [
        (ok, "pass"),
        (wrong("def g():\n    while True:\n        pass"), "timeout"),
        (no, "fail"),
        (wrong("import ctypes\ndef g():\n    ctypes.string_at(0)"), "error"),
        (ok, "pass"),
        (wrong(SIGNAL_PROOF), "timeout"),
        (wrong("import os\ndef g():\n    os._exit(3)"), "error"),
        (Program("def f(x) return", "def g():\n    return 1"), "syntax"),
        (ok, "pass"),
        (wrong("def g():\n    return [0] * (1 << 40)"), "memory"),
        (no, "fail"),
        (
            wrong(
                "import threading, time\ndef g():\n    threading.Thread(target=time.sleep, args=(100,)).start()\n"
                "    return 4"
            ),
            "fail",
        ),
        (wrong("import builtins\ndef g():\n    builtins.len = None\n    return 4"), "error"),
        (ok, "pass"),
        (wrong("import time\ndef g():\n    time.sleep(100)"), "timeout"),
        (forging(FORGED_PASS, "os._exit(0)"), "error"),
        (ok, "pass"),
        (wrong("def g():\n    raise SystemExit(0)"), "error"),
        (no, "fail"),
        (ok, "pass"),
    ]
    assert len(mix) == 20
    calls: list[tuple[int, Verdict]] = []
    verdicts = fast.verify([prog for prog, _ in mix], on_verdict=lambda index, verdict: calls.append((index, verdict)))
    assert [v.status for v in verdicts] == [status for _, status in mix]
    assert sorted(index for index, _ in calls) == list(range(20))
    assert all(verdicts[index] is verdict for index, verdict in calls)
    assert_nothing_outlives()
    check_ordinary(fast.verify(ORDINARY_PROGRAMS))


def test_empty_batch(mixed):
    assert mixed.verify([]) == []


def test_a_closed_sandbox_leaves_nothing_behind():
    box = Sandbox(workers=2, timeout=1.0)
    with box:
        check_ordinary(box.verify(ORDINARY_PROGRAMS))
        pids = [w.launcher.pid for w in box._wardens] + [w.pid for w in box._wardens]
    assert len(pids) == 4
    # launchers and wardens are reaped by the time close() returns (no zombies left to init)
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []
    assert_nothing_outlives()


# ---------------------------------------------------------------- the package itself


def test_import_path_has_no_torch():
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run(
        [sys.executable, "-c", "import codeplay_lightning.execution, sys; assert 'torch' not in sys.modules, 'torch'"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "kwargs", [{"workers": 0}, {"workers": -1}, {"timeout": 0}, {"timeout": -1.0}, {"memory_mb": 8}]
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        Sandbox(**kwargs)


def test_importing_a_submodule_of_a_watched_package_is_not_tampering(solo):
    imports = program(
        "def f(x: str) -> bool:\n    return x == 'ok'", "import json.tool\nimport os.path\ndef g():\n    return 'ok'"
    )
    verdicts = contained(solo, imports)
    assert verdicts[0].status == "pass", verdicts[0].detail


def test_a_failing_on_verdict_callback_leaves_the_sandbox_usable(fast):
    def explode(index, verdict):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fast.verify([wrong("def g():\n    return 4")] + ORDINARY_PROGRAMS, on_verdict=explode)
    check_ordinary(fast.verify(ORDINARY_PROGRAMS))


def test_a_sandbox_started_in_a_thread_that_exits_keeps_working():
    import threading

    box = Sandbox(workers=1, timeout=2.0)
    started = threading.Thread(target=lambda: box.isolation)
    started.start()
    started.join()
    time.sleep(0.3)
    with box:
        check_ordinary(box.verify(ORDINARY_PROGRAMS))
