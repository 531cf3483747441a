"""Escapes through what a process shares with the host: SysV shared memory, process and memory counts,
host unix sockets, and a supervisor killed mid-program."""

from __future__ import annotations

import socket
import textwrap
import time

import pytest
from sandbox_support import (
    contained,
    marker,
    process_table,
    program,
    start_supervisor,
    wrong,
)

from codeplay_lightning.execution import Sandbox

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
    find = program(
        "def f(x: str):\n    return x == 'absent'",
        textwrap.dedent(SYSV_SHM).replace("MODE", "0o666").replace("WRITE", "False"),
    )
    verdicts = solo.verify([plant, find, plant, find])
    assert [v.status for v in verdicts] == ["fail", "pass", "fail", "pass"], verdicts


def test_processes_are_bounded(namespaced):
    (verdict,) = contained(
        namespaced,
        program(
            "def f(x: int):\n    return x < 100",
            """
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
        """,
        ),
    )
    assert verdict.status == "pass", verdict


def test_memory_is_bounded_across_processes(namespaced):
    """Four children of 300 MiB each: within any one process's limit, not within the program's."""
    with Sandbox(workers=1, timeout=5.0, memory_mb=512) as box:
        if "cgroup" not in box.isolation:
            pytest.skip(f"needs a memory cgroup; here: {box.isolation}")
        (verdict,) = contained(
            box,
            wrong("""
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
            """),
        )
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
        (verdict,) = contained(
            namespaced,
            program(
                "def f(x: str):\n    return x == 'unreachable'",
                f"""
            import socket
            def g():
                try:  # (no program can make a socket at all)
                    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    client.connect({str(path)!r})
                    return "connected"
                except OSError:
                    return "unreachable"
            """,
            ),
        )
        assert verdict.status == "pass", verdict
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_nothing_outlives_a_killed_supervisor(tmp_path):
    mark = marker()
    g = (
        f"import ctypes, subprocess\ndef g():\n    ctypes.CDLL(None).prctl(1, 0)\n"  # PR_SET_PDEATHSIG, 0
        f"    subprocess.Popen(['sleep', '{mark}'])\n    import time\n    time.sleep(60)"
    )
    supervisor = start_supervisor(tmp_path, g, workers=2)
    deadline = time.monotonic() + 10
    while not [entry for entry in process_table().values() if mark.encode() in entry[2]]:
        assert time.monotonic() < deadline, "the program never started"
        time.sleep(0.05)
    supervisor.kill()
    supervisor.wait()
    script = supervisor.args[1].encode()  # its command line: no process of the supervisor's is left either
    deadline = time.monotonic() + 5
    while (
        left := [entry for entry in process_table().values() if mark.encode() in entry[2] or script in entry[2]]
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [entry for entry in left if entry[1] not in ("Z", "X")] == []
