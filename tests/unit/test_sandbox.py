"""Containment suite for the sandbox (`codeplay_lightning.execution`).

Every hostile program is checked four ways: (a) the caller - this pytest process - survives, (b) its
verdict is right, (c) nothing it started outlives it, (d) the verdicts after it are unaffected: it is
followed, in the same `verify` batch and again in a later batch, by ordinary programs (`ORDINARY`)
whose verdicts must come out exactly right. The ordinary programs are chosen so that each tampering
attempt below would flip at least one of them.

Timeouts are tested on a sandbox with a 0.5 s timeout; the rest share module-scoped sandboxes.
The attacks that broke the earlier in-process design (forged replies with a stolen request id,
rewriting the judge's own code, stdlib state left behind) are kept as ordinary tests.
"""

from __future__ import annotations

import decimal
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from sandbox_support import (
    ORDINARY,
    ORDINARY_PROGRAMS,
    REPO,
    assert_nothing_outlives,
    check_ordinary,
    contained,
    marker,
    process_table,
    program,
    wrong,
)

from codeplay_lightning.execution import Program, Sandbox, Verdict

FAST = 0.5  # timeout for sandboxes where timeouts are expected
SECRET_NAME = "CODEPLAY_TEST_API_KEY"
SECRET_VALUE = f"sk-secret-{uuid.uuid4().hex}"


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sandbox():
    """Two workers: hostile programs share the pool with ordinary ones."""
    with Sandbox(workers=2, timeout=2.0) as box:
        yield box


@pytest.fixture(scope="module")
def solo():
    """One worker: whatever follows a hostile program runs on its worker (or its replacement).
    Smaller memory limit: memory exhaustion is reached sooner."""
    with Sandbox(workers=1, timeout=2.0, memory_mb=256) as box:
        yield box


@pytest.fixture(scope="module")
def fast():
    """For programs expected to time out."""
    with Sandbox(workers=2, timeout=FAST) as box:
        yield box


@pytest.fixture(scope="module")
def namespaced(sandbox):
    if not sandbox.isolation.startswith("namespaces"):
        pytest.skip(f"needs full isolation (root); here: {sandbox.isolation}")
    return sandbox


def test_isolation_is_reported(sandbox):
    assert sandbox.isolation.startswith(("namespaces", "basic"))
    if os.geteuid() == 0:
        assert sandbox.isolation.startswith("namespaces")


# ---------------------------------------------------------------- basics


def test_ordinary_programs(sandbox):
    check_ordinary(sandbox.verify(ORDINARY_PROGRAMS))
    assert_nothing_outlives()


def test_pass_is_the_only_passed_verdict(sandbox):
    verdicts = sandbox.verify(ORDINARY_PROGRAMS)
    assert [v.passed for v in verdicts] == [status == "pass" for _, status, _ in ORDINARY]
    assert all(v.status in ("pass", "fail", "error", "timeout", "memory", "syntax") for v in verdicts)
    assert all(0 <= v.seconds < 2.0 for v in verdicts)


def test_fail_detail_shows_what_f_returned(sandbox):
    verdicts = sandbox.verify([
        program("def f(x: int):\n    return x + 1", "def g():\n    return 41"),
        program("def f(x: int):\n    return None", "def g():\n    return 1"),
        program("def f(x: str):\n    return 'abc' * 2", "def g():\n    return 'x'"),
    ])
    assert [v.status for v in verdicts] == ["fail"] * 3
    assert "f returned 42" in verdicts[0].detail
    assert (verdicts[0].answer, verdicts[0].returned) == ("41", "42")  # the same, as fields
    assert (verdicts[2].answer, verdicts[2].returned) == ("'x'", "'abcabc'")
    assert "f returned None" in verdicts[1].detail
    assert "abcabc" in verdicts[2].detail


def test_error_detail_has_type_message_and_program_line(sandbox):
    (verdict,) = sandbox.verify([program("def f(x: int):\n    return True", """
        def g():
            values = [1, 2]
            return values[5]
        """)])
    assert verdict.status == "error"
    assert "IndexError" in verdict.detail and "list index out of range" in verdict.detail
    assert 'File "<g>", line 3, in g' in verdict.detail and "return values[5]" in verdict.detail
    assert len(verdict.detail.splitlines()) < 15  # short: no frames of the sandbox itself
    assert "warden.py" not in verdict.detail

    (verdict,) = sandbox.verify([program("""
        def f(x: int):
            helper = {"a": 1}
            return helper[x]
        """, "def g():\n    return 7")])
    assert verdict.status == "error"
    assert "KeyError: 7" in verdict.detail and 'File "<f>", line 3, in f' in verdict.detail


@pytest.mark.parametrize("f, g, fragment", [
    ("def f(x) return x", "def g():\n    return 1", "f:"),
    ("def f(x):\n    return x", "def g(:\n    return 1", "g:"),
    ("def f(x):\n    return x", "def h():\n    return 1", "no function g"),
    ("def f(x):\n    return x", "", "no function g"),
    ("def f(x):\n    return x", "g = 5", "no function g"),
    ("def f(x):\n    return x", "def g():\n    return '\0'\x00", "g:"),
    ("def f(x):\n    return x", "def g():\n    return " + "(" * 500 + ")" * 500, "g:"),
    ("x = 1", "def g():\n    return 1", "no function f"),
])
def test_syntax(sandbox, f, g, fragment):
    (verdict,) = sandbox.verify([Program(f, g)])
    assert verdict.status == "syntax", verdict
    assert fragment in verdict.detail


@pytest.mark.parametrize("f, g, ans_type, status", [
    ("def f(x):\n    return True", "def g():\n    return True", "int", "fail"),  # bool is not int
    ("def f(x):\n    return True", "def g():\n    return 1", "bool", "fail"),
    ("def f(x):\n    return True", "def g():\n    return True", "bool", "pass"),
    ("def f(x):\n    return True", "def g():\n    class I(int):\n        pass\n    return I(3)", "int", "fail"),
    ("def f(x):\n    return True", "def g():\n    class S(str):\n        pass\n    return S('a')", "str", "fail"),
    ("def f(x):\n    return True", "def g():\n    return 1", "float", "fail"),
    ("def f(x):\n    return True", "def g():\n    return 1.0", "int", "fail"),
    ("def f(x):\n    return True", "def g():\n    return 1.5", "float", "pass"),
    ("def f(x):\n    return x == [[1, 2], [3]]", "def g():\n    return [[1, 2], [3]]", "List[List[int]]", "pass"),
    ("def f(x):\n    return True", "def g():\n    return [[1, 2], [3.0]]", "List[List[int]]", "fail"),
    ("def f(x):\n    return True", "def g():\n    return [[1], 2]", "List[List[int]]", "fail"),
    ("def f(x):\n    return True", "def g():\n    return [(1, 2)]", "List[List[int]]", "fail"),
    ("def f(x):\n    return True", "def g():\n    return [[True]]", "List[List[int]]", "fail"),
    ("def f(x):\n    return True", "def g():\n    return []", "List[List[int]]", "pass"),
    ("def f(x):\n    return True", "def g():\n    class L(list):\n        pass\n    return L([1])", "List[int]", "fail"),
    ("def f(x):\n    return True", "def g():\n    return [1, 2]", "list[int]", "pass"),
    # ints cross as hex: huge and negative ones arrive intact
    ("def f(x):\n    return x == 3 ** 200000", "def g():\n    return 3 ** 200000", "int", "pass"),
    ("def f(x):\n    return x == [[-5, 0], [7 ** 99]]", "def g():\n    return [[-5, 0], [7 ** 99]]",
     "List[List[int]]", "pass"),
    ("def f(x):\n    return True", "def g():\n    return ['a', 'b']", "List[str]", "pass"),
    # the type comes from f's first annotation when ans_type is None
    ("def f(x: str):\n    return True", "def g():\n    return 5", None, "fail"),
    ("def f(x: str):\n    return True", "def g():\n    return '5'", None, "pass"),
    ("def f(x: List[int], n=3):\n    return True", "def g():\n    return [1.0]", None, "fail"),
    # ans_type wins over the annotation
    ("def f(x: str):\n    return True", "def g():\n    return 5", "int", "pass"),
    # no type at all: any JSON value
    ("def f(x):\n    return x == {'a': [1, None]}", "def g():\n    return {'a': [1, None]}", None, "pass"),
    ("def f(x):\n    return x == {1, 2}", "def g():\n    return {2, 1}", None, "error"),  # no set in JSON
    ("def f(x):\n    return True", "def g():\n    return (1, 2)", None, "error"),  # nor a tuple
    ("def f(x):\n    return True", "def g():\n    x = []\n    x.append(x)\n    return x", None, "error"),
])
def test_answer_types(sandbox, f, g, ans_type, status):
    (verdict,) = sandbox.verify([Program(f, g, ans_type)])
    assert verdict.status == status, verdict
    if status == "fail":
        assert "is not of type" in verdict.detail
    if status == "error":
        assert "cannot be judged" in verdict.detail or "nests deeper" in verdict.detail


@pytest.mark.parametrize("f, ans_type, named", [
    ("def f(x):\n    return True", "Dict[str, int]", "Dict[str, int]"),
    ("def f(x: dict):\n    return True", None, "dict"),
    ("def f(x: 'Tuple[int, int]'):\n    return True", None, "Tuple[int, int]"),
    ("def f(x):\n    return True", "List[List[complex]]", "complex"),
])
def test_unsupported_answer_type_is_an_error_naming_it(sandbox, f, ans_type, named):
    (verdict,) = sandbox.verify([Program(f, "def g():\n    return 1", ans_type)])
    assert verdict.status == "error"
    assert "unsupported answer type" in verdict.detail and named in verdict.detail


def test_output_is_captured(sandbox):
    passing, failing, erring = sandbox.verify([
        program("def f(x: int):\n    print('f saw', x)\n    return x == 3",
                "import sys\ndef g():\n    print('hello from g')\n    sys.stderr.write('warning from g\\n')\n    return 3"),
        program("def f(x: int):\n    print('checking')\n    return False", "def g():\n    return 3"),
        program("def f(x: int):\n    return True", "def g():\n    print('about to fail')\n    raise ValueError('nope')"),
    ])
    assert passing.status == "pass"
    assert passing.output == "hello from g\nwarning from g\nf saw 3\n"
    assert failing.status == "fail" and failing.output == "checking\n"
    assert erring.status == "error" and erring.output == "about to fail\n" and "ValueError: nope" in erring.detail
    # output does not leak into the next program
    (quiet,) = sandbox.verify([ORDINARY_PROGRAMS[0]])
    assert quiet.output == ""


# ---------------------------------------------------------------- infinite loops


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


@pytest.mark.parametrize("hostile", [
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
    wrong("import time\ndef g():\n    time.sleep(1000)"),
    wrong("import itertools\ndef g():\n    return sum(itertools.count())"),  # never leaves C code
    wrong("import os\ndef g():\n    read, write = os.pipe()\n    return os.read(read, 1)"),
], ids=["loop_in_g", "loop_in_f", "signals_blocked_and_ignored", "catches_everything", "sleep",
        "c_level_loop", "blocks_on_a_pipe"])
def test_infinite_loops_time_out(fast, hostile):
    started = time.monotonic()
    (verdict,) = contained(fast, hostile)
    assert verdict.status == "timeout", verdict
    assert verdict.seconds == pytest.approx(FAST, abs=0.1)
    assert time.monotonic() - started < FAST + 3.0


# ---------------------------------------------------------------- memory, recursion, crashes


@pytest.mark.parametrize("hostile", [
    wrong("def g():\n    return [0] * (1 << 40)"),
    wrong("def g():\n    return 'x' * (1 << 40)"),
    wrong("def g():\n    blocks = []\n    while True:\n        blocks.append(bytearray(1 << 24))"),
    wrong("def g():\n    blocks = []\n    while True:\n        blocks.append([None] * (1 << 20))"),
    program("def f(x):\n    return len(x * (1 << 40)) > 0", "def g():\n    return 'ab'"),
], ids=["huge_list", "huge_string", "growing_buffers", "growing_lists", "in_f"])
def test_memory_exhaustion(solo, hostile):
    (verdict,) = contained(solo, hostile)
    assert verdict.status == "memory", verdict


def test_deep_recursion_is_an_error(sandbox):
    (verdict,) = contained(sandbox, wrong("def g():\n    def down(n):\n        return down(n + 1)\n    return down(0)"))
    assert verdict.status == "error"
    assert "RecursionError" in verdict.detail


@pytest.mark.parametrize("hostile, signal_name", [
    (wrong("import ctypes\ndef g():\n    return ctypes.string_at(0)"), "SIGSEGV"),
    (wrong("""
        import sys
        def g():
            sys.setrecursionlimit(10 ** 8)
            class Deep:
                def __repr__(self):
                    return repr(self)  # every level goes through C: the C stack overflows
            return repr(Deep())
        """), "SIGSEGV"),
    # SIGABRT, or SIGSEGV when abort() finds its signal dropped (the worker is PID 1 of its namespace)
    (wrong("import os\ndef g():\n    os.abort()"), ("SIGABRT", "SIGSEGV")),
    (wrong("import os, signal\ndef g():\n    signal.raise_signal(signal.SIGBUS)"), None),  # dropped for PID 1
], ids=["null_pointer", "c_stack_overflow", "abort", "raise_sigbus"])
def test_crashes(sandbox, hostile, signal_name):
    (verdict,) = contained(sandbox, hostile)
    assert verdict.status != "pass"
    assert verdict.status in (("error", "timeout") if signal_name else ("error", "timeout", "fail")), verdict
    if signal_name and verdict.status == "error":
        assert "g's process ended without an answer" in verdict.detail
        assert any(name in verdict.detail for name in ([signal_name] if isinstance(signal_name, str) else signal_name))


# ---------------------------------------------------------------- exits


@pytest.mark.parametrize("g, fragment", [
    ("def g():\n    exit()", ""),
    ("def g():\n    quit(3)", ""),
    ("import sys\ndef g():\n    sys.exit(0)", "SystemExit"),
    ("def g():\n    raise SystemExit", "SystemExit"),
    ("def g():\n    raise KeyboardInterrupt", "KeyboardInterrupt"),
    ("def g():\n    raise GeneratorExit", "GeneratorExit"),
    ("import os\ndef g():\n    os._exit(0)", "exit code 0"),
    ("import os\ndef g():\n    os._exit(1)", "exit code 1"),
])
def test_exits_are_errors(sandbox, g, fragment):
    (verdict,) = contained(sandbox, program("def f(x):\n    return True", g))  # f would pass anything
    assert verdict.status == "error", verdict
    assert fragment in verdict.detail


# ---------------------------------------------------------------- killing


@pytest.mark.parametrize("g", [
    "import os, signal\ndef g():\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 4",
    "import os, signal\ndef g():\n    os.killpg(0, signal.SIGKILL)\n    return 4",
    "import os, signal\ndef g():\n    os.kill(0, signal.SIGKILL)\n    return 4",
    "import os, signal\ndef g():\n    os.kill(os.getpid(), signal.SIGKILL)\n    return 4",
    "import os, signal\ndef g():\n    os.kill(os.getpid(), signal.SIGSTOP)\n    return 4",
    "import os, signal\ndef g():\n    os.killpg(os.getpgid(os.getppid() or 1), signal.SIGTERM)\n    return 4",
], ids=["parent", "process_group", "pid_0", "itself", "stops_itself", "parent_group_sigterm"])
def test_kills(sandbox, g):
    (verdict,) = contained(sandbox, wrong(g))
    assert verdict.status in ("fail", "error", "timeout"), verdict


def test_kill_everything(namespaced):
    hostile = wrong("import os, signal\ndef g():\n    try:\n        os.kill(-1, signal.SIGKILL)\n"
                    "    except OSError:\n        pass\n    return 4")
    verdicts = contained(namespaced, hostile, hostile)
    assert {v.status for v in verdicts} <= {"fail", "error"}


def test_kill_everything_and_pass(namespaced):
    (verdict,) = contained(namespaced, program("def f(x):\n    return x == 4",
                                               "import os, signal\ndef g():\n    try:\n"
                                               "        os.kill(-1, signal.SIGKILL)\n    except OSError:\n"
                                               "        pass\n    return 4"))
    assert verdict.status in ("pass", "error")  # killing nothing is fine; killing itself is an error


# ---------------------------------------------------------------- processes outliving the program


def test_subprocess_does_not_outlive_the_program(sandbox):
    mark = marker()
    (verdict,) = contained(sandbox, program("def f(x):\n    return x == 4", f"""
        import subprocess
        def g():
            subprocess.Popen(["sleep", "{mark}"])
            return 4
        """), marker=mark)
    assert verdict.status == "pass", verdict  # starting a process is allowed; it just cannot stay


def test_double_fork_daemon_does_not_outlive_the_program(sandbox):
    mark = marker()
    (verdict,) = contained(sandbox, wrong(f"""
        import os
        def g():
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", "{mark}"])
                os._exit(0)
            os.wait()
            return 4
        """), marker=mark)
    assert verdict.status == "fail", verdict


def test_python_daemon_without_exec_does_not_outlive_the_program(sandbox):
    (verdict,) = contained(sandbox, wrong("""
        import os, time
        def g():
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    while True:
                        time.sleep(0.01)
                os._exit(0)
            os.wait()
            return 4
        """))
    assert verdict.status == "fail", verdict


def test_fork_that_keeps_running_the_worker(sandbox):
    """The child returns from g too: two processes then compute and report the same verdict."""
    (verdict,) = contained(sandbox, wrong("import os\ndef g():\n    os.fork()\n    return 4"))
    assert verdict.status in ("fail", "error"), verdict
    (verdict,) = contained(sandbox, program("def f(x):\n    return x == 4", "import os\ndef g():\n    os.fork()\n    return 4"))
    assert verdict.status in ("pass", "error"), verdict


def test_many_processes(sandbox):
    mark = marker()
    (verdict,) = contained(sandbox, wrong(f"""
        import subprocess
        def g():
            for _ in range(20):
                try:
                    subprocess.Popen(["sleep", "{mark}"], start_new_session=True)
                except OSError:
                    break
            return 4
        """), marker=mark)
    assert verdict.status in ("fail", "error"), verdict


# ---------------------------------------------------------------- files


ATTACKS = """
    import os, shutil
    def g():
        done = []
        for name, attack in [
            ("delete", lambda: os.remove(VICTIM)),
            ("overwrite", lambda: open(VICTIM, "w").write("pwned")),
            ("append", lambda: open(VICTIM, "a").write("pwned")),
            ("create", lambda: open(os.path.join(os.path.dirname(VICTIM), "planted"), "w").write("x")),
            ("rename", lambda: os.rename(VICTIM, VICTIM + ".moved")),
            ("chmod", lambda: os.chmod(VICTIM, 0o777)),
            ("symlink", lambda: os.symlink("/etc/passwd", os.path.join(os.path.dirname(VICTIM), "link"))),
            ("rmtree", lambda: shutil.rmtree(os.path.dirname(VICTIM))),
        ]:
            try:
                attack()
                done.append(name)
            except OSError:
                pass
        return done
"""


def snapshot(directory: Path) -> dict:
    return {path.name: (path.read_bytes(), path.stat().st_mode, path.stat().st_mtime_ns)
            for path in sorted(directory.iterdir())}


def attack_files(sandbox: Sandbox, directory: Path) -> None:
    victim = directory / "victim.txt"
    victim.write_text("precious\n")
    before = snapshot(directory)
    g = textwrap.dedent(ATTACKS).replace("VICTIM", repr(str(victim)))
    (verdict,) = contained(sandbox, program("def f(done: List[str]) -> bool:\n    return done == []", g))
    assert verdict.status == "pass", verdict  # every attack failed
    assert snapshot(directory) == before
    assert victim.read_text() == "precious\n"


def test_files_in_callers_tmp_path_are_untouched(sandbox, tmp_path):
    tmp_path.chmod(0o777)  # even world-writable
    attack_files(sandbox, tmp_path)


def test_files_in_root_owned_dirs_are_untouched(sandbox):
    build = REPO / "build"  # git-ignored; visible inside the sandbox, unlike /var/tmp
    created = not build.exists()
    build.mkdir(exist_ok=True)
    try:
        for parent in (Path("/var/tmp"), build):
            directory = Path(tempfile.mkdtemp(prefix="sandbox-victim-", dir=parent))
            directory.chmod(0o755)  # readable by the sandbox's uid, not writable
            try:
                attack_files(sandbox, directory)
            finally:
                shutil.rmtree(directory)
    finally:
        if created:
            try:
                build.rmdir()  # only if still empty: someone else may have started using it
            except OSError:
                pass


def test_world_writable_host_dirs_are_untouched(namespaced):
    """Outside /tmp: /run/lock (/var/lock) is world-writable on most hosts."""
    targets = [path for path in ("/run/lock", "/var/lock", "/dev/shm", "/tmp", "/var/tmp")
               if os.path.isdir(path) and os.stat(path).st_mode & 0o002]
    name = f"sandbox-planted-{uuid.uuid4().hex}"
    g = f"""
        import os
        def g():
            done = []
            for directory in {targets!r}:
                try:
                    with open(os.path.join(directory, {name!r}), "w") as planted:
                        planted.write("x")
                    done.append(directory)
                except OSError:
                    pass
            return done
    """
    try:
        (verdict,) = contained(namespaced, program("def f(x):\n    return True", g))
        assert verdict.status == "pass"
        assert [path for path in targets if os.path.exists(os.path.join(path, name))] == []
    finally:
        for path in targets:
            Path(path, name).unlink(missing_ok=True)


def test_system_files_are_untouched(namespaced):
    before = Path("/etc/hostname").read_bytes() if Path("/etc/hostname").exists() else None
    (verdict,) = contained(namespaced, program("def f(done: List[str]):\n    return done == []", """
        import os
        def g():
            done = []
            for path in ["/etc/hostname", "/etc/passwd", "/root/.bashrc", "/usr/bin/env"]:
                try:
                    with open(path, "a") as handle:
                        handle.write("")
                    done.append(path)
                except OSError:
                    pass
            return done
        """))
    assert verdict.status == "pass", verdict
    if before is not None:
        assert Path("/etc/hostname").read_bytes() == before


def test_working_directory_is_writable_and_fresh(solo):
    writer = program("def f(x: str):\n    return x == 'hello'", """
        import os
        def g():
            os.makedirs("sub/dir")
            with open("sub/dir/note.txt", "w") as note:
                note.write("hello")
            with open("top.txt", "w") as note:
                note.write("x")
            with open(os.path.join(os.getcwd(), "sub/dir/note.txt")) as note:
                return note.read()
        """)
    sealed = program("def f(x: str):\n    return x == 'sealed'", """
        import os
        def g():
            os.makedirs("locked/inner")
            open("locked/inner/file", "w").close()
            os.chmod("locked/inner", 0)
            os.chmod("locked", 0)
            return "sealed"
        """)
    fresh = program("def f(x: List[str]):\n    return x == []", "import os\ndef g():\n    return os.listdir('.')")
    verdicts = solo.verify([writer, fresh, sealed, fresh, writer, fresh])
    assert [v.status for v in verdicts] == ["pass"] * 6, verdicts
    check_ordinary(solo.verify(ORDINARY_PROGRAMS))
    assert_nothing_outlives()


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


@pytest.mark.parametrize("hostile", [
    wrong(PATCHING_THREAD),
    wrong("import threading, time\ndef g():\n    threading.Thread(target=time.sleep, args=(100,)).start()\n    return 4"),
    wrong("""
        import threading, time, math
        def g():
            def later():
                time.sleep(0.05)  # well after the program returned
                math.sqrt = lambda x: 3.0
            threading.Thread(target=later).start()
            return 4
        """),
], ids=["patches_len_every_ms", "sleeping_thread", "patches_after_return"])
def test_threads_that_outlive_the_program(solo, hostile):
    (verdict,) = contained(solo, hostile)
    assert verdict.status in ("fail", "error"), verdict


# ---------------------------------------------------------------- network


@pytest.fixture
def tcp_server():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def test_network_is_unreachable(namespaced, tcp_server):
    port = tcp_server.getsockname()[1]
    g = f"""
        import socket
        def g():
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=0.3).close()
                return "connected"
            except OSError as error:
                return "failed: " + type(error).__name__
    """
    (verdict,) = contained(namespaced, program("def f(x: str):\n    return x.startswith('failed')", g))
    assert verdict.status == "pass", verdict
    with pytest.raises(BlockingIOError):
        tcp_server.accept()  # nobody connected


def test_network_error_when_not_caught(namespaced, tcp_server):
    port = tcp_server.getsockname()[1]
    (verdict,) = contained(namespaced, wrong(
        f"import socket\ndef g():\n    socket.create_connection(('127.0.0.1', {port}), timeout=0.3)\n    return 5"))
    assert verdict.status == "error" and "Error" in verdict.detail, verdict
    with pytest.raises(BlockingIOError):
        tcp_server.accept()


def test_udp_and_dns_do_not_hang(namespaced):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    port = receiver.getsockname()[1]
    g = f"""
        import socket
        def g():
            outcomes = []
            for attempt in [
                lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port})),
                lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)),
                lambda: socket.getaddrinfo("example.com", 80),
                lambda: socket.gethostbyname("pypi.org"),
            ]:
                try:
                    attempt()
                    outcomes.append("worked")
                except OSError:
                    outcomes.append("failed")
            return outcomes
    """
    started = time.monotonic()
    try:
        (verdict,) = contained(namespaced, program(
            "def f(x: List[str]):\n    return x[1:] == ['failed'] * 3 and x[0] in ('worked', 'failed')", g))
        assert verdict.status == "pass", verdict
        assert verdict.seconds < 1.5
        with pytest.raises(BlockingIOError):
            receiver.recv(16)  # the loopback datagram stayed in the sandbox's own network
    finally:
        receiver.close()
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------- flooding output, fake protocol


FRAME = struct.pack(">I", 40) + json.dumps({"id": "0" * 16, "status": "pass"}).ljust(40).encode()


@pytest.mark.parametrize("g", [
    "def g():\n    for _ in range(50):\n        print('x' * 1_000_000)\n    return 4",
    "import sys\ndef g():\n    for _ in range(50):\n        sys.stderr.write('e' * 1_000_000)\n    return 4",
    "import os\ndef g():\n    os.write(1, b'x' * 50_000_000)\n    return 4",
    "import os\ndef g():\n    os.write(2, b'x' * 50_000_000)\n    return 4",
    "import sys\ndef g():\n    sys.__stdout__.write('y' * 10_000_000)\n    sys.__stdout__.flush()\n    return 4",
    "def g():\n    print('x' * 10_000_000, end='')\n    print('tail')\n    return 4",
], ids=["print_50mb", "stderr_50mb", "os_write_1", "os_write_2", "real_stdout", "one_huge_print"])
def test_flooding_output(sandbox, g):
    (verdict,) = contained(sandbox, wrong(g))
    assert verdict.status == "fail", verdict
    assert len(verdict.output) <= 4096 + 100
    if "print" in g or "stderr" in g:
        assert verdict.output[:4096].strip("xe") == "" and "more characters dropped" in verdict.output


@pytest.mark.parametrize("g", [
    "import json\ndef g():\n    print(json.dumps({'id': '0' * 16, 'status': 'pass', 'detail': '', 'seconds': 0.0}))\n    return 4",
    f"def g():\n    print({FRAME.decode('latin-1')!r}, end='')\n    return 4",
    f"import os\ndef g():\n    os.write(1, {FRAME!r})\n    os.write(2, {FRAME!r})\n    return 4",
    f"import sys\ndef g():\n    sys.__stdout__.buffer.write({FRAME!r})\n    sys.__stdout__.flush()\n    return 4",
], ids=["json_line", "framed_print", "framed_os_write", "framed_real_stdout"])
def test_fake_protocol_messages_on_output(sandbox, g):
    (verdict,) = contained(sandbox, wrong(g))
    assert verdict.status == "fail", verdict


# ---------------------------------------------------------------- forged replies


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


@pytest.mark.parametrize("hostile", [
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
], ids=["pass", "pass_then_exit", "twice", "supervisor_shaped", "answer_then_exit", "deep_json", "nan",
        "short_frame", "garbage", "json_list", "huge_header", "closes_answer_pipe"])
def test_forged_replies(fast, hostile):
    (verdict,) = contained(fast, hostile)
    assert verdict.status in ("fail", "error"), verdict


def test_a_frame_announced_but_never_sent_times_out(fast):
    (verdict,) = contained(fast, forging('struct.pack(">I", 1000)', "import time\n    time.sleep(100)"))
    assert verdict.status == "timeout", verdict


# ---------------------------------------------------------------- shared interpreter state


TAMPERING = {
    "builtins_len": "import builtins\ndef g():\n    builtins.len = lambda *args: 4\n    return 4",
    "builtins_sorted_deleted": "import builtins\ndef g():\n    del builtins.sorted\n    return 4",
    "builtins_via_dunder": "def g():\n    __builtins__.len = lambda *args: 4\n    return 4",
    "math_sqrt": "import math\ndef g():\n    math.sqrt = lambda x: 3.0\n    return 4",
    "counter_method": "import collections\ndef g():\n    collections.Counter.most_common = lambda self, n=None: [('a', 2)]\n    return 4",
    "sys_modules_math": """
        import sys, types
        def g():
            fake = types.ModuleType("math")
            fake.sqrt = lambda x: 3.0
            sys.modules["math"] = fake
            return 4
        """,
    "typing_list": "import typing\ndef g():\n    typing.List = None\n    return 4",
    "module_dict": "import math\ndef g():\n    vars(math)['sqrt'] = abs\n    return 4",
}


@pytest.mark.parametrize("g", TAMPERING.values(), ids=TAMPERING.keys())
def test_tampering_with_shared_state(solo, g):
    """What g changes in its process dies with it: its answer is wrong, or it broke its own runner."""
    (verdict,) = contained(solo, wrong(g))
    assert verdict.status in ("fail", "error"), verdict


def test_tampering_with_shared_state_in_f(solo):
    """f may do as it likes in its own judge: it decides its own puzzle only."""
    (verdict,) = contained(solo, program("import builtins\ndef f(x):\n    builtins.len = lambda *a: 4\n    return True",
                                         "def g():\n    return 1"))
    assert verdict.status in ("pass", "error"), verdict


def test_tampering_does_not_reach_f(solo):
    (verdict,) = contained(solo, program("def f(x: List[int]):\n    return len(x) == 4", """
        import builtins
        def g():
            builtins.len = lambda *args: 4
            return [1]
        """))
    assert verdict.status in ("fail", "error"), verdict


def test_legitimate_state_changes_are_undone(solo):
    """Changes a program may make on purpose: undone quietly, not held against it."""
    (verdict,) = contained(solo, program("def f(x):\n    return x == 4", """
        import os, sys, random, signal, decimal, gc
        def g():
            sys.setrecursionlimit(100)
            random.seed(123)
            decimal.getcontext().prec = 3
            os.environ["SOMETHING"] = "1"
            sys.path.insert(0, "/nonexistent")
            signal.signal(signal.SIGALRM, lambda *a: None)
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            gc.disable()
            import colorsys  # a new import is forgotten, not an error
            return 4
        """))
    assert verdict.status == "pass", verdict
    third = str(decimal.Context().divide(1, 3))  # the default context, as a fresh program gets it
    (verdict,) = solo.verify([program(f"def f(x: List[str]):\n    return x == [{third!r}, '', 'ok']", """
        import decimal, os, sys, time
        def g():
            def deep(n):
                return n if n == 0 else deep(n - 1)
            deep(500)
            time.sleep(0.1)  # the alarm set by the last program must not fire here
            return [str(decimal.Decimal(1) / decimal.Decimal(3)), os.environ.get("SOMETHING", ""),
                    "ok" if "/nonexistent" not in sys.path else "path"]
        """)])
    assert verdict.status == "pass", verdict


PATCH_SQRT = "import math; math.sqrt = lambda x: 3.0"  # flips two ordinary programs


@pytest.mark.parametrize("g", [
    f"""
    def g():
        class Bomb:
            def __del__(self):
                {PATCH_SQRT}
        bomb = Bomb()  # kept alive by the exception's traceback until the worker lets go of it
        raise ValueError("boom")
    """,
    f"""
    def g():
        class Bomb:
            def __del__(self):
                {PATCH_SQRT}
        bomb = Bomb()
        bomb.cycle = bomb  # finalized at the worker's garbage collection
        return 4
    """,
    f"""
    import weakref
    def g():
        class Node:
            pass
        node = Node()
        node.cycle = node
        def patch():
            {PATCH_SQRT}
        weakref.finalize(node, patch)
        return 4
    """,
    f"""
    def g():
        class Sneaky(Exception):
            def __str__(self):  # runs when the worker describes the error
                {PATCH_SQRT}
                return "sneaky"
        raise Sneaky()
    """,
    f"""
    def g():
        class Phoenix:
            def __del__(self):  # each collection leaves another one behind
                {PATCH_SQRT}
                again = Phoenix()
                again.cycle = again
        first = Phoenix()
        first.cycle = first
        return 4
    """,
    f"""
    def g():
        class Egg:
            def __init__(self, hatch):
                self.hatch, self.cycle = hatch, self
            def __del__(self):  # patches only on the second generation: after any single collection
                if self.hatch:
                    {PATCH_SQRT}
                else:
                    Egg(True)
        Egg(False)
        return 4
    """,
], ids=["finalizer_in_traceback", "finalizer_in_cycle", "weakref_finalize", "exception_str",
        "resurrecting_finalizer", "second_generation_finalizer"])
def test_program_code_running_after_the_program(solo, g):
    """Program code can run after the program returned: finalizers, an exception's __str__."""
    (verdict,) = contained(solo, wrong(g))
    assert verdict.status in ("fail", "error"), verdict


def test_audit_hooks_do_not_outlive_the_program(solo):
    """Audit hooks cannot be removed: one added by a program would run inside every later program."""
    (verdict,) = contained(solo, wrong("""
        import sys
        def g():
            def hook(event, args):
                if event == "exec":  # the worker defining a later program's f or g
                    namespace = sys._getframe(1).f_locals.get("namespace")
                    if isinstance(namespace, dict):
                        namespace["len"] = lambda x: 4
                        namespace["sorted"] = lambda x: [2, 1]
            sys.addaudithook(hook)
            return 4
        """))
    assert verdict.status in ("fail", "error"), verdict


def test_request_pipe_replaced(solo):
    """A program that swaps the worker's request pipe for /dev/null (no extra fd left open)."""
    (verdict,) = contained(solo, wrong("""
        import json, os, sys
        def g():
            spare = os.open("/dev/null", os.O_RDONLY)
            os.dup2(spare, json.loads(sys.argv[1])["request_fd"])
            os.close(spare)
            return 4
        """))
    assert verdict.status == "fail", verdict


@pytest.mark.parametrize("g", [
    "import sys\ndef g():\n    sys._getframe(1).f_locals['f'].__code__ = (lambda x: True).__code__\n    return 4",
    "import sys\ndef g():\n    sys._getframe(1).f_locals['f'].__globals__['x'] = 5\n    return 4",
    "import gc\ndef g():\n    for obj in gc.get_objects():\n        if getattr(obj, '__name__', '') == 'f' and callable(obj):\n"
    "            obj.__code__ = (lambda x: True).__code__\n    return 4",
    # the globals every program starts from: changed here, every later program would see it
    "import sys\ndef g():\n    base = sys._getframe(1).f_locals['base']\n"
    "    base['len'] = lambda x: 4\n    base['sorted'] = lambda x: [2, 1]\n    return 4",
], ids=["rewrites_f_code", "plants_f_global", "finds_f_with_gc", "plants_global_for_all"])
def test_g_cannot_reach_f(solo, g):
    """f and g get separate namespaces: g must not be able to rewrite the f that judges it."""
    (verdict,) = contained(solo, program("def f(y):\n    return y == 5 if 'x' not in globals() else x == 5", g))
    assert verdict.status in ("fail", "error"), verdict


# ---------------------------------------------------------------- faked equality and truthiness


@pytest.mark.parametrize("f, g", [
    ("def f(x: int):\n    return x == 5",
     "def g():\n    class Eq:\n        def __eq__(self, other):\n            return True\n    return Eq()"),
    ("def f(x: int):\n    return x == 5",
     "def g():\n    class I(int):\n        def __eq__(self, other):\n            return True\n    return I(4)"),
    ("def f(x: List[int]):\n    return x == [5]",
     "def g():\n    class L(list):\n        def __eq__(self, other):\n            return True\n    return L([4])"),
    ("def f(x: int):\n    return x == 5",
     "def g():\n    class Liar:\n        __class__ = property(lambda self: int)\n        def __eq__(self, other):\n"
     "            return True\n    return Liar()"),
    ("def f(x: int):\n    return 1", "def g():\n    return 5"),
    ("def f(x: int):\n    return 'yes'", "def g():\n    return 5"),
    ("def f(x: int):\n    return [True]", "def g():\n    return 5"),
    ("def f(x: int):\n    class T:\n        def __bool__(self):\n            return True\n        def __eq__(self, o):\n"
     "            return True\n    return T()", "def g():\n    return 5"),
    ("import numbers\ndef f(x: int):\n    return 1.0", "def g():\n    return 5"),
], ids=["always_equal", "int_subclass", "list_subclass", "lies_about_class",
        "f_returns_1", "f_returns_str", "f_returns_list", "f_returns_truthy_object", "f_returns_1.0"])
def test_faked_equality_and_truthiness_fail(sandbox, f, g):
    (verdict,) = contained(sandbox, program(f, g))
    assert verdict.status == "fail", verdict


# ---------------------------------------------------------------- environment, determinism


def test_environment_secrets_are_invisible(monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    g = """
        import os
        def g():
            seen = [repr(dict(os.environ))]
            for entry in os.listdir("/proc"):
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
        (verdict,) = box.verify([program("import os\ndef f(x: str):\n    return x == ''",
                                         f"import os\ndef g():\n    return os.environ.get({SECRET_NAME!r}, '')")])
        assert verdict.status == "pass", verdict


def test_determinism(sandbox):
    expected = random.Random(0).random()
    draw = program(f"def f(x: float):\n    return x == {expected!r}", "import random\ndef g():\n    return random.random()")
    reseed = program("def f(x):\n    return True", "import random\ndef g():\n    random.seed(99)\n    random.random()\n    return 1")
    verdicts = sandbox.verify([draw, reseed, draw, reseed, draw, draw])
    assert [v.status for v in verdicts] == ["pass"] * 6, verdicts
    (again,) = sandbox.verify([draw])
    assert again.status == "pass"
    hashed = program("def f(x: int):\n    return x", "def g():\n    return hash('codeplay') or 1")
    first, second = sandbox.verify([hashed, hashed])
    (third,) = sandbox.verify([hashed])
    assert first.status == "fail" and first.detail.startswith("f returned ")  # f returned the hash
    assert first.detail == second.detail == third.detail


def test_working_directory_exists_and_is_empty(sandbox):
    verdicts = sandbox.verify([program("def f(x: List[bool]):\n    return x == [True, True, True]", """
        import os
        def g():
            cwd = os.getcwd()
            return [os.path.isdir(cwd), os.listdir(cwd) == [], os.listdir(".") == []]
        """)] * 3)
    assert [v.status for v in verdicts] == ["pass"] * 3


# ---------------------------------------------------------------- queued work


def test_queued_work_is_not_lost(fast):
    ok = program("def f(x: int):\n    return x == 2", "import math\ndef g():\n    return int(math.sqrt(4))")
    no = program("def f(x: int):\n    return x == 3", "def g():\n    return 2")
    mix = [
        (ok, "pass"), (wrong("def g():\n    while True:\n        pass"), "timeout"), (no, "fail"),
        (wrong("import ctypes\ndef g():\n    ctypes.string_at(0)"), "error"), (ok, "pass"),
        (wrong(SIGNAL_PROOF), "timeout"), (wrong("import os\ndef g():\n    os._exit(3)"), "error"),
        (Program("def f(x) return", "def g():\n    return 1"), "syntax"), (ok, "pass"),
        (wrong("def g():\n    return [0] * (1 << 40)"), "memory"), (no, "fail"),
        (wrong("import threading, time\ndef g():\n    threading.Thread(target=time.sleep, args=(100,)).start()\n    return 4"), "fail"),
        (wrong("import builtins\ndef g():\n    builtins.len = None\n    return 4"), "error"), (ok, "pass"),
        (wrong("import time\ndef g():\n    time.sleep(100)"), "timeout"),
        (forging(FORGED_PASS, "os._exit(0)"), "error"), (ok, "pass"),
        (wrong("def g():\n    raise SystemExit(0)"), "error"),
        (no, "fail"), (ok, "pass"),
    ]
    assert len(mix) == 20
    calls: list[tuple[int, Verdict]] = []
    verdicts = fast.verify([prog for prog, _ in mix], on_verdict=lambda index, verdict: calls.append((index, verdict)))
    assert [v.status for v in verdicts] == [status for _, status in mix]
    assert sorted(index for index, _ in calls) == list(range(20))
    assert all(verdicts[index] is verdict for index, verdict in calls)
    assert_nothing_outlives()
    check_ordinary(fast.verify(ORDINARY_PROGRAMS))


def test_empty_batch(sandbox):
    assert sandbox.verify([]) == []


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
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-c", "import codeplay_lightning.execution, sys; assert 'torch' not in sys.modules, 'torch'"],
        env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("kwargs", [{"workers": 0}, {"workers": -1}, {"timeout": 0}, {"timeout": -1.0},
                                    {"memory_mb": 8}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        Sandbox(**kwargs)



def test_importing_a_submodule_of_a_watched_package_is_not_tampering(solo):
    imports = program("def f(x: str) -> bool:\n    return x == 'ok'",
                      "import json.tool\nimport os.path\ndef g():\n    return 'ok'")
    verdicts = contained(solo, imports)
    assert verdicts[0].status == "pass", verdicts[0].detail


def test_a_failing_on_verdict_callback_leaves_the_sandbox_usable(fast):
    def explode(index, verdict):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fast.verify([wrong("def g():\n    return 4")] + ORDINARY_PROGRAMS, on_verdict=explode)
    check_ordinary(fast.verify(ORDINARY_PROGRAMS))

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


@pytest.mark.parametrize("g", [
    """
    import sys
    def g():
        worker = sys.modules["__main__"]
        worker.run_program.__code__ = (lambda f_source, g_source, ans_type, base: ("pass", "")).__code__
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
], ids=["replaces_run_program", "trace_rewrites_result", "trace_blinds_repair"])
def test_runner_internals(fresh, g):
    (verdict,) = contained(fresh, wrong(g))
    assert verdict.status != "pass"


@pytest.mark.parametrize("g", [
    "import collections\ndef g():\n    collections.Counter.most_common.__code__ = (lambda self, n=None: [('a', 2)]).__code__\n    return 4",
    "import random\ndef g():\n    random._inst._randbelow = lambda n: 0\n    return 4",
    "import json\ndef g():\n    json._default_encoder.indent = 1\n    return 4",
], ids=["function_code", "instance_attribute", "default_encoder"])
def test_stdlib_object_state(fresh, g):
    check_stdlib_probes(fresh, g)


POISON_REGEX_CACHE = ("import re\ndef g():\n    re.match('a+', 'a')\n    for key in list(re._cache):\n"
                      "        if key[1] == 'a+':\n            re._cache[key] = re.compile('b+')\n    return 4")


def test_regex_cache_poisoning_does_not_leak(fresh):
    check_stdlib_probes(fresh, POISON_REGEX_CACHE)


def check_stdlib_probes(sandbox: Sandbox, g: str) -> None:
    probes = [
        (program("import random\ndef f(x: int):\n    return x == random.Random(0).choice(range(100))",
                 "import random\ndef g():\n    return random.choice(range(100))"), "pass"),
        (program("import json\ndef f(x: str):\n    return x == '[1, 2]'", "import json\ndef g():\n    return json.dumps([1, 2])"), "pass"),
        (program("import re\ndef f(x: bool):\n    return x", "import re\ndef g():\n    return re.match('a+', 'aaa') is not None"), "pass"),
    ]
    verdicts = sandbox.verify([wrong(g), *ORDINARY_PROGRAMS, *(prog for prog, _ in probes)])
    assert verdicts[0].status == "fail"
    check_ordinary(verdicts[1:1 + len(ORDINARY)])
    assert [v.status for v in verdicts[1 + len(ORDINARY):]] == [status for _, status in probes]


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


@pytest.mark.parametrize("g", [
    RAW_CLONE,
    "import gc\ndef g():\n    gc.callbacks.append(lambda phase, info: __import__('os').write(3, b'x' * 100))\n    return 4",
    "import os\ndef g():\n    os.register_at_fork(before=lambda: os.write(3, b'pass'), after_in_child=lambda: os._exit(0))\n"
    "    return 4",
    "import sys\ndef g():\n    main = sys.modules['__main__']\n    main.run_g.__code__ = (lambda *a: ['pass', '']).__code__\n"
    "    main.judge_answer.__code__ = (lambda *a: ['pass', '']).__code__\n    return 4",
    "import sys\ndef g():\n    sys.modules['__main__'].compile_source = lambda *a: compile('def g():\\n    return 5', '<g>', 'exec')\n"
    "    return 4",
], ids=["raw_clone_child_forges", "gc_callback", "at_fork_hooks", "replaces_run_g_and_judge", "replaces_compiler"])
def test_no_later_program_is_made_to_pass(solo, g):
    """Each attack is followed on the same warden by wrong programs (in `contained`) that must fail."""
    later_wrong = [wrong("def g():\n    return 4")] * 3
    verdicts = solo.verify([wrong(g), *later_wrong])
    assert [v.status for v in verdicts[1:]] == ["fail"] * 3, verdicts
    contained(solo, wrong(g))


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
        return [limits, handlers, signal.set_wakeup_fd(-1), os.environ.get("TZ", ""), time.tzname[0], os.nice(0),
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
    "rlimit_as": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_AS, (200 << 20, 200 << 20))\n    return 4",
    "rlimit_nofile": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_NOFILE, (8, 8))\n    return 4",
    "rlimit_stack": "import resource\ndef g():\n    resource.setrlimit(resource.RLIMIT_STACK, (1 << 16, 1 << 16))\n    return 4",
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
                 "                fill.write(b'x' * (1 << 20))\n        except OSError:\n            pass\n    return 4",
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


def test_a_runner_cannot_stop_its_puzzles_judge_for_the_next_program(solo):
    f = "def f(x: int) -> bool:\n    return x == 5"
    right = Program(f, "def g():\n    return 5\n")
    verdicts = solo.verify([right, Program(f, STOP_THE_JUDGE), right, right])
    assert [v.status for v in verdicts] == ["pass", "error", "pass", "pass"], verdicts


# ---------------------------------------------------------------- escapes


SYSV_SHM = """
    import ctypes
    def g():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        ident = libc.shmget(0xC0DE, 4096, MODE)
        if ident < 0:
            return "absent"
        address = libc.shmat(ident, None, 0)
        if WRITE:
            ctypes.memmove(address, b"planted", 7)
        return ctypes.string_at(address, 7).decode("latin-1")
"""


def test_sysv_shared_memory_dies_with_the_program(solo):
    plant = wrong(textwrap.dedent(SYSV_SHM).replace("MODE", "0o1666").replace("WRITE", "True"))  # IPC_CREAT
    find = program("def f(x: str):\n    return x == 'absent'",
                   textwrap.dedent(SYSV_SHM).replace("MODE", "0o666").replace("WRITE", "False"))
    verdicts = solo.verify([plant, find, plant, find])
    assert [v.status for v in verdicts] == ["fail", "pass", "fail", "pass"], verdicts


def test_processes_are_bounded(namespaced):
    (verdict,) = contained(namespaced, program("def f(x: int):\n    return x < 100", """
        import os, time
        def g():
            started = 0
            for _ in range(300):
                try:
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    started += 1
                except OSError:
                    break
            return started
        """))
    assert verdict.status == "pass", verdict


def test_memory_is_bounded_across_processes(namespaced):
    """Four children of 300 MiB each: within any one process's limit, not within the program's."""
    with Sandbox(workers=1, timeout=5.0, memory_mb=512) as box:
        if "cgroup" not in box.isolation:
            pytest.skip(f"needs a memory cgroup; here: {box.isolation}")
        (verdict,) = contained(box, wrong("""
            import os, time
            def g():
                for _ in range(4):
                    if os.fork() == 0:
                        block = bytearray(300 << 20)
                        block[::4096] = b"x" * len(block[::4096])
                        time.sleep(30)
                        os._exit(0)
                os.wait()
                return 4
            """))
        assert verdict.status == "memory", verdict


def test_host_unix_sockets_are_unreachable(namespaced, tmp_path):
    path = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    tmp_path.chmod(0o755)
    server.listen(1)
    server.setblocking(False)
    try:
        (verdict,) = contained(namespaced, program("def f(x: str):\n    return x == 'unreachable'", f"""
            import socket
            def g():
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    client.connect({str(path)!r})
                    return "connected"
                except OSError:
                    return "unreachable"
            """))
        assert verdict.status == "pass", verdict
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


SUPERVISED = """
import sys
from codeplay_lightning.execution import Program, Sandbox, Verdict
with Sandbox(workers=2, timeout=60.0) as box:
    print(box.isolation, flush=True)
    box.verify([Program("def f(x):\\n    return True", sys.argv[1])] * 2)
"""


def test_nothing_outlives_a_killed_supervisor(tmp_path):
    mark = marker()
    g = (f"import ctypes, subprocess\ndef g():\n    ctypes.CDLL(None).prctl(1, 0)\n"  # PR_SET_PDEATHSIG, 0
         f"    subprocess.Popen(['sleep', '{mark}'])\n    import time\n    time.sleep(60)")
    script = tmp_path / "supervisor.py"
    script.write_text(SUPERVISED)
    supervisor = subprocess.Popen([sys.executable, str(script), g], stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
    supervisor.stdout.readline()
    deadline = time.monotonic() + 10
    while not [entry for entry in process_table().values() if mark.encode() in entry[2]]:
        assert time.monotonic() < deadline, "the program never started"
        time.sleep(0.05)
    supervisor.kill()
    supervisor.wait()
    deadline = time.monotonic() + 5
    while (left := [entry for entry in process_table().values()
                    if mark.encode() in entry[2] or str(script).encode() in entry[2]]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [entry for entry in left if entry[1] not in ("Z", "X")] == []


# ---------------------------------------------------------------- correct programs stay correct


@pytest.mark.parametrize("g", [
    "def g():\n    handle = open('note.txt', 'w')\n    handle.write('x')\n    return 5",
    "import socket\ndef g():\n    left, right = socket.socketpair()\n    return 5",
    "def g():\n    async def later():\n        return 1\n    later()\n    return 5",
    "import warnings\ndef g():\n    warnings.warn('careful')\n    return 5",
], ids=["unclosed_file", "unclosed_socket", "unawaited_coroutine", "warning"])
def test_untidy_correct_programs_pass(sandbox, g):
    (verdict,) = sandbox.verify([program("def f(x: int):\n    return x == 5", g)])
    assert verdict.status == "pass", verdict


def test_annotations_are_evaluated_as_in_p3(sandbox):
    (verdict,) = sandbox.verify([program("def f(x: int) -> bool:\n    return f.__annotations__['x'] is int and x == 1",
                                         "def g() -> int:\n    return 1 if g.__annotations__['return'] is int else 0")])
    assert verdict.status == "pass", verdict


def test_a_sandbox_started_in_a_thread_that_exits_keeps_working():
    import threading

    box = Sandbox(workers=1, timeout=2.0)
    started = threading.Thread(target=lambda: box.isolation)
    started.start()
    started.join()
    time.sleep(0.3)
    with box:
        check_ordinary(box.verify(ORDINARY_PROGRAMS))


# ---------------------------------------------------------------- a hostile warden cannot take the caller down


FAKE_WARDEN = """
import json, os, struct, sys, time
sys.path.insert(0, {execution!r})
from warden import pack, read_frame, write_all
settings = json.loads(sys.argv[1])
requests, replies = settings["request_fd"], settings["reply_fd"]
write_all(replies, pack("pid", str(os.getpid())))
write_all(replies, pack("ready", "full", "namespaces: none, a fake warden"))
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
def test_hostile_warden_replies_are_errors(monkeypatch, tmp_path, reply):
    import codeplay_lightning.execution.sandbox as sandbox_module

    script = tmp_path / "warden.py"
    script.write_text(FAKE_WARDEN.format(execution=str(sandbox_module.WARDEN_SCRIPT.parent), reads=True, reply=reply))
    monkeypatch.setattr(sandbox_module, "WARDEN_SCRIPT", script)
    with Sandbox(workers=1, timeout=0.5) as box:
        started = time.monotonic()
        verdicts = box.verify(ORDINARY_PROGRAMS[:2])
        assert [v.status for v in verdicts] == ["error", "error"], verdicts
        assert all("sandbox lost this program" in v.detail for v in verdicts)
        assert time.monotonic() - started < 20


def test_a_warden_that_stops_reading_cannot_block_the_caller(monkeypatch, tmp_path):
    import codeplay_lightning.execution.sandbox as sandbox_module

    script = tmp_path / "warden.py"
    script.write_text(FAKE_WARDEN.format(execution=str(sandbox_module.WARDEN_SCRIPT.parent), reads=False, reply="b''"))
    monkeypatch.setattr(sandbox_module, "WARDEN_SCRIPT", script)
    huge = program("def f(x):\n    return True", "def g():\n    return " + repr("x" * (4 << 20)))  # beyond any pipe buffer
    with Sandbox(workers=1, timeout=0.5) as box:
        started = time.monotonic()
        (verdict,) = box.verify([huge])
        assert verdict.status == "timeout", verdict
        assert time.monotonic() - started < 10


# ---------------------------------------------------------------- without root


UNPRIVILEGED = """
import json, os, sys
from codeplay_lightning.execution import Program, Sandbox, Verdict
cases = json.loads(sys.argv[1])
with Sandbox(workers=2, timeout=1.0, memory_mb=256) as box:
    isolation = box.isolation
    verdicts = box.verify([Program(f, g) for f, g, _ in cases])
print(json.dumps({"uid": os.getuid(), "isolation": isolation, "statuses": [v.status for v in verdicts],
                  "details": [v.detail for v in verdicts]}))
"""


KILL_EVERY_PEER = """import errno, os, signal
def g():
    me, outcomes = os.getpid(), []
    for entry in os.listdir("/proc"):
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


def _unprivileged_command(held: list[str]) -> list[str]:
    """Runs the script in $SCRIPT with the argument $ARGUMENT as uid 65534, in a private mount
    namespace where the interpreter, the virtual environment and this checkout are reachable
    wherever they live: every directory on their paths that others cannot enter (a pyenv under
    /root, a clone in a 0700 `mktemp -d`) is covered with a tmpfs that holds only the entries on
    those paths, bind-mounted back. `held` gets the empty directories used on the way."""
    needed = [Path(os.path.realpath(path)) for path in (sys.base_prefix, sys.prefix, REPO / "codeplay_lightning")]
    closed = sorted({Path(*path.parts[:depth]) for path in needed for depth in range(1, len(path.parts))
                     if not os.stat(Path(*path.parts[:depth])).st_mode & 0o001}, key=lambda path: len(path.parts))
    mounts = []
    for ancestor in closed:
        entries = sorted({ancestor / path.parts[len(ancestor.parts)] for path in needed
                          if path.parts[:len(ancestor.parts)] == ancestor.parts})
        held += [tempfile.mkdtemp(prefix="codeplay-reachable-") for _ in entries]
        mounts += [f"mount --bind {entry} {hold}" for entry, hold in zip(entries, held[-len(entries):])]
        mounts.append(f"mount -t tmpfs -o mode=755 tmpfs {ancestor}")
        mounts += [f"mkdir {entry} && mount --move {hold} {entry}" for entry, hold in zip(entries, held[-len(entries):])]
    run = (f"exec setpriv --reuid=65534 --regid=65534 --clear-groups env PYTHONPATH={REPO} "
           f'{sys.executable} -c "$SCRIPT" "$ARGUMENT"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", " && ".join([*mounts, run])]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become another user")
def test_without_root_the_sandbox_degrades_explicitly_and_still_judges():
    mark = marker()
    cases = [(prog.f, prog.g, status) for prog, status, _ in ORDINARY] + [
        ("def f(x):\n    return x == 5", "def g():\n    while True:\n        pass", "timeout"),
        ("def f(x):\n    return x == 5", "def g():\n    return [0] * (1 << 40)", "memory"),
        ("def f(x: int):\n    return x < 100", "import os, time\ndef g():\n    n = 0\n    for _ in range(300):\n"
         "        try:\n            if os.fork() == 0:\n                time.sleep(30)\n                os._exit(0)\n"
         "            n += 1\n        except OSError:\n            break\n    return n", "pass"),
        ("def f(x):\n    return x == 5", f"import subprocess\ndef g():\n    subprocess.Popen(['sleep', '{mark}'],"
         " start_new_session=True)\n    return 4", "fail"),
        ("def f(x):\n    return x == 5", "import os\ndef g():\n    os.makedirs('a/b')\n    os.chmod('a/b', 0)\n"
         "    os.chmod('a', 0)\n    return 4", "fail"),
        ("def f(x: List[str]):\n    return x == []", "import os\ndef g():\n    return os.listdir('.')", "pass"),
        # the same uid as the judge here: a judge the runner stopped is replaced before the next program
        ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
        ("def f(x: int):\n    return x == 5", STOP_THE_JUDGE, "error"),
        ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
        # every other process of its uid - the zygote, the wardens, their launchers, the supervisor - and -1
        ("def f(x: List[int]):\n    return len(x) >= 7 and set(x) == {1}", KILL_EVERY_PEER, "pass"),
        ("def f(x: int):\n    return x == 5", "def g():\n    return 5", "pass"),
    ]
    held: list[str] = []
    try:
        result = subprocess.run(_unprivileged_command(held), capture_output=True, text=True, timeout=120,
                                env={**os.environ, "SCRIPT": UNPRIVILEGED, "ARGUMENT": json.dumps(cases)})
    finally:
        for directory in held:
            os.rmdir(directory)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["uid"] == 65534
    assert report["isolation"].startswith("basic (not root)") and "rlimits only" in report["isolation"]
    assert report["statuses"] == [status for _, _, status in cases], report["details"]
    assert [entry for entry in process_table().values() if mark.encode() in entry[2] and entry[1] != "Z"] == []
