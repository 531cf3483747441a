"""The seccomp allowlist: every syscall off the list is refused, whatever its number (those Linux has not named yet
included), the syscalls on it are refused the arguments a program does not need, and honest programs (the bundled
puzzles' reference solutions, numpy Calls, threads, forks, files, signals, sleeps) are judged exactly as before."""

from __future__ import annotations

import os
import re
import textwrap

import pytest
from sandbox_support import REPO, contained, program

from codeplay_lightning.execution import Call, Program
from codeplay_lightning.execution.warden.seccomp import ABSENT, SYSCALLS, ZYGOTE_NEEDS
from codeplay_lightning.puzzles import bundled_puzzles

COLUMN = {"x86_64": 0, "aarch64": 1}.get(os.uname().machine)
pytestmark = pytest.mark.skipif(COLUMN is None, reason="the filter knows x86_64 and aarch64")
EPERM, ENOSYS = 1, 38
REFUSED = {"io_setup": (206, 0)}  # (x86_64, aarch64): off the list
# x86_64's uretprobe and uprobe, which recent kernels run whatever a filter says (6.18 here): outside a probe's
# trampoline the first kills its caller with SIGILL and the second fails with ENXIO
BEYOND_FILTERS = (335, 336) if COLUMN == 0 else ()


def _number(name: str) -> int:
    return {**SYSCALLS, **ABSENT, **REFUSED}[name][COLUMN]


def test_every_syscall_off_the_list_is_refused(mixed):
    """Every number up to 470 that a program may not make (Linux 6.18 ends at 467), and 1000: EPERM before the
    kernel sees it (the two of ABSENT: ENOSYS). The zygote's own needs are refused to a program too."""
    allowed = {numbers[COLUMN] for name, numbers in SYSCALLS.items() if name not in ZYGOTE_NEEDS}
    expected = {number: EPERM for number in [*range(471), 1000] if number not in {*allowed, *BEYOND_FILTERS}}
    expected.update({numbers[COLUMN]: ENOSYS for numbers in ABSENT.values()})
    assert len(expected) > 350
    g = textwrap.dedent(f"""
        import ctypes
        def g():
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            wrong = []
            for number, errno in {sorted(expected.items())!r}:
                ctypes.set_errno(0)
                result = libc.syscall(number, 0, 0, 0, 0, 0, 0)
                if result != -1 or ctypes.get_errno() != errno:
                    wrong.append([number, result, ctypes.get_errno()])
            return wrong
        """)
    (verdict,) = contained(mixed, program("def f(x: List[List[int]]):\n    return x == []", g))
    assert verdict.status == "pass", verdict


ARGUMENTS = """
import ctypes, fcntl, os, resource, threading
CLONE, STATX, IO_SETUP, MMAP = {numbers}
def g():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def errno_of(number, *arguments):
        ctypes.set_errno(0)
        result = libc.syscall(number, *arguments)
        if result == 0 and number == CLONE:  # the child of a clone that should have been refused
            os._exit(0)
        if result > 0 and number == CLONE:
            os.waitpid(result, 0)
        return ctypes.get_errno() if result == -1 else 0
    def refusal(action):
        try:
            action()
            return 0
        except OSError as error:
            return error.errno
        except ValueError:  # resource's word for EPERM
            return 1
    found = {{}}
    pidfd = ctypes.c_int(-1)
    found["clone_pidfd"] = errno_of(CLONE, 0x1000 | 17, 0, ctypes.byref(pidfd), 0, 0)  # CLONE_PIDFD | SIGCHLD
    found["clone_newuser"] = errno_of(CLONE, 0x10000000 | 17, 0, 0, 0, 0)
    found["clone_parent"] = errno_of(CLONE, 0x8000 | 17, 0, 0, 0, 0)
    found["statx_mount_id"] = errno_of(STATX, -100, b"/tmp", 0, 0x4000, ctypes.create_string_buffer(256))
    found["io_setup"] = errno_of(IO_SETUP, 1, ctypes.byref(ctypes.c_ulong(0)))
    found["mmap_hugetlb"] = errno_of(MMAP, 0, 2 << 20, 3, 0x22 | 0x40000, -1, 0)  # MAP_PRIVATE|ANONYMOUS|HUGETLB
    found["setrlimit"] = refusal(lambda: resource.setrlimit(resource.RLIMIT_NPROC, (1, 1)))
    found["prlimit_set"] = refusal(lambda: resource.prlimit(0, resource.RLIMIT_NPROC, (1, 1)))
    child = os.fork()
    if child == 0:
        os._exit(0)
    found["prlimit_of_another"] = refusal(lambda: resource.prlimit(child, resource.RLIMIT_NOFILE))
    os.waitpid(child, 0)
    found["pipe_size"] = refusal(lambda: fcntl.fcntl(4, 1031, 1 << 20))  # F_SETPIPE_SZ: pages counted per user
    found["ioctl_fionread"] = refusal(lambda: fcntl.ioctl(3, 0x541B, b"0000"))
    # what programs use: their own limits, os.stat (without statx), threads and fork
    found["getrlimit"] = refusal(lambda: resource.getrlimit(resource.RLIMIT_NOFILE))
    found["stat"] = refusal(lambda: os.stat("/tmp"))
    found["thread"] = refusal(lambda: [threading.Thread(target=len, args=[[]]).start()])
    found["isatty"] = int(os.isatty(3))
    found["set_inheritable"] = refusal(lambda: os.set_inheritable(3, False))
    return found
"""


def test_arguments_a_program_does_not_need_are_refused(mixed):
    refused = ["clone_newuser", "clone_parent", "clone_pidfd", "io_setup", "mmap_hugetlb"]
    refused += ["ioctl_fionread", "pipe_size", "prlimit_of_another", "prlimit_set", "setrlimit"]
    expected = {name: EPERM for name in refused} | {"statx_mount_id": ENOSYS}
    expected |= {"getrlimit": 0, "stat": 0, "thread": 0, "isatty": 0, "set_inheritable": 0}
    numbers = tuple(_number(name) for name in ("clone", "statx", "io_setup", "mmap"))
    f = f"def f(x):\n    print(sorted(x.items()))\n    return x == {expected!r}"
    (verdict,) = contained(mixed, program(f, ARGUMENTS.format(numbers=numbers)))
    assert verdict.status == "pass", verdict.output


EVERYDAY = """
import datetime, decimal, fractions, hashlib, os, random, select, shutil, signal, statistics, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor
def g():
    done = []
    thread = threading.Thread(target=done.append, args=[1])
    thread.start()
    thread.join()
    with ThreadPoolExecutor(2) as pool:
        done += pool.map(abs, [-2, -3])
    child = os.fork()
    if child == 0:
        os._exit(3)
    done.append(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "a.txt")
        with open(path, "w") as handle:
            handle.write("text")
        shutil.copyfile(path, path + ".copy")
        os.rename(path + ".copy", path + ".moved")
        shutil.copy2(path, path + ".copy2")
        done.append(len(os.listdir(directory)) + os.stat(path).st_size)
    signal.signal(signal.SIGALRM, lambda number, frame: done.append(number))
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    time.sleep(0.05)
    select.select([], [], [], 0.05)
    random.SystemRandom().random(), os.urandom(8), hashlib.sha256(b"x").digest(), datetime.datetime.now()
    statistics.mean([1, 2]), fractions.Fraction(1, 3), decimal.Decimal(1) / 7, os.cpu_count(), os.getcwd()
    return done
"""


def test_honest_programs_are_judged_as_before(mixed, numpy_sandbox):
    """The bundled puzzles' reference solutions pass; a program that uses threads, fork, files, shutil's copies, a
    timer, select as a sleep and the clocks passes; numpy's arithmetic, linear algebra and random numbers return as
    they do here."""
    solutions = [Program(p.f, g, p.ans_type, p.name) for p in bundled_puzzles() for g in p.solutions]
    assert [v.status for v in mixed.verify(solutions)] == ["pass"] * len(solutions)
    everyday = program("def f(x: List[int]):\n    return x == [1, 2, 3, 3, 7, 14]", EVERYDAY)
    (verdict,) = mixed.verify([everyday])
    assert verdict.status == "pass", verdict
    numeric = textwrap.dedent("""
        import numpy as np
        def model(size):
            matrix = np.random.default_rng(0).random((size, size))
            return [float((matrix @ matrix.T).trace()), float(np.linalg.det(np.eye(3) * 2)), int(np.argmax(matrix))]
        """)
    calls = numpy_sandbox.apply([Call(numeric, "model", 300)] * 2)
    assert [v.status for v in calls] == ["returned"] * 2, calls
    assert calls[0].value == calls[1].value and calls[0].value[1] == pytest.approx(8.0)


def test_the_docs_name_every_syscall_a_program_may_make():
    section = (REPO / "docs/sandbox.md").read_text().split("### What a program may do", 1)[1].split("\n\n`clone3`")[0]
    cells = [line.split("|")[2] for line in section.splitlines() if line.startswith("| ") and "syscalls |" not in line]
    named = {name for cell in cells for name in re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cell))}
    allowed = {name: numbers for name, numbers in SYSCALLS.items() if name not in ZYGOTE_NEEDS}
    assert named == set(allowed), named ^ set(allowed)
    x86_64, aarch64 = (sum(numbers[column] is not None for numbers in allowed.values()) for column in (0, 1))
    assert f"{x86_64} syscalls on x86_64" in section and f"{aarch64} on aarch64" in section
