"""Every program in a world of its own: no verdict depends on another program. For each kind of kernel object a
program can observe or change, a probe program reads it and changes it, and its verdict must be its verdict judged
alone on a fresh sandbox: after other programs on the same warden, in another sandbox, and beside another program
running at the same time on the other warden or in another sandbox.

A probe's f answers from what it observed (`observed % 2 == 0`, or whether it found a mark): any count or mark that
reached it from an earlier program would flip its verdict, which is the reward hack of a puzzle that passes only
its first attempt per warden (D = N_a instead of 1)."""

from __future__ import annotations

import os
import textwrap
import threading

import pytest
from sandbox_support import FAST

from codeplay_lightning.execution import Program, Sandbox
from codeplay_lightning.execution.warden.seccomp import ABSENT, SYSCALLS

STDLIB_FILE = os.path.join(os.path.dirname(os.__file__), "pydoc.py")  # in every root, read by no other test
COLUMN = 0 if os.uname().machine == "x86_64" else 1
CLONE, STATX = SYSCALLS["clone"][COLUMN], ABSENT["statx"][COLUMN]
IO_SETUP, IO_DESTROY = (206, 207) if COLUMN == 0 else (0, 1)  # off the allowlist

SEQUENTIAL = {  # f reads a count or a mark, then leaves one for whoever comes next
    # 1. a reused tmpfs: its inode counter
    "tmpfs_inode_counter": """
        import os
        def f(x: int):
            with open("probe", "w") as probe:
                number = os.fstat(probe.fileno()).st_ino
            os.remove("probe")
            return number % 2 == x
        """,
    # 4. counters of the warden's life: pids, and pid 1's and 2's accounts of their children
    "pid_counter": """
        import os
        def f(x: int):
            child = os.fork()
            if child == 0:
                os._exit(0)
            os.waitpid(child, 0)
            return child % 2 == x
        """,
    "proc_accounts": """
        def f(x: int):
            try:
                with open("/proc/1/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                return (int(fields[7]) + int(fields[8])) % 2 == x  # minor faults of it and of its children
            except OSError:
                return x == 0
        """,
    # 5. objects numbered machine-wide
    "pipe_inode_counter": """
        import os
        def f(x: int):
            try:
                read_end, write_end = os.pipe()
            except PermissionError:
                return x == 0
            return os.fstat(read_end).st_ino % 2 == x
        """,
    # 3. the page cache of the files every program can read
    "page_cache": f"""
        import os
        def f(x: int):
            page = os.open({STDLIB_FILE!r}, os.O_RDONLY)
            try:
                os.preadv(page, [bytearray(4096)], 0, os.RWF_NOWAIT)
                cached = True
            except BlockingIOError:
                cached = False
            except PermissionError:
                return x == 0
            os.pread(page, 4096, 0)  # cached now, for whoever comes next
            return int(cached) == x
        """,
    # 6. counters of the whole machine that syscalls read: a pidfd's inode number counts the processes made
    "pidfd_inode": f"""
        import ctypes, os
        def f(x: int):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            pidfd = ctypes.c_int(-1)
            child = libc.syscall({CLONE}, 0x1000 | 17, 0, ctypes.byref(pidfd), 0, 0)  # CLONE_PIDFD | SIGCHLD
            if child == 0:
                os._exit(0)
            if child < 0:
                return x == 0
            os.waitpid(child, 0)
            return os.fstat(pidfd.value).st_ino % 2 == x
        """,
    # a unique mount id counts the mounts made machine-wide: /tmp's minus the root's, the program processes before
    "statx_mount_id": f"""
        import ctypes
        def mount_id(path):
            buffer = ctypes.create_string_buffer(256)
            if ctypes.CDLL(None).syscall({STATX}, -100, path, 0, 0x4000, buffer) != 0:  # STATX_MNT_ID_UNIQUE
                return 0
            return int.from_bytes(buffer.raw[144:152], "little")
        def f(x: int):
            return mount_id(b"/tmp") - mount_id(b"/") < 6  # the first program's judge: 4 (2 for each program)
        """,
}


def probe(f: str) -> Program:
    return Program(textwrap.dedent(f).strip() + "\n", "def g():\n    return 0", "int")


def evict_the_page() -> None:
    """The host drops the probe's page from the page cache, so that a probe judged alone finds it cold."""
    handle = os.open(STDLIB_FILE, os.O_RDONLY)
    os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(handle)


def alone(program: Program, **settings) -> str:
    evict_the_page()
    with Sandbox(workers=1, **settings) as box:
        (verdict,) = box.verify([program])
    return verdict.status


@pytest.mark.parametrize("name", SEQUENTIAL)
def test_a_probe_judged_after_others_is_judged_as_alone(name):
    program = probe(SEQUENTIAL[name])
    expected = alone(program)
    with Sandbox(workers=1) as box:  # the same warden, program after program
        assert [v.status for v in box.verify([program] * 4)] == [expected] * 4, name
    with Sandbox(workers=1) as box:  # another sandbox, after those
        assert [v.status for v in box.verify([program] * 2)] == [expected] * 2, name
    with Sandbox(workers=2) as box:  # and beside itself on the other warden
        assert [v.status for v in box.verify([program] * 6)] == [expected] * 6, name


CONCURRENT = {  # (sender, receiver): the sender holds a mark while the receiver, started at the same time, looks
    # 2. locks and watches on the files both can read
    "flock": (
        f"""
        import fcntl, time
        def f(x: int):
            handle = open({STDLIB_FILE!r})
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
            except OSError:
                pass
            time.sleep(0.6)
            return True
        """,
        f"""
        import fcntl, time
        def f(x: int):
            time.sleep(0.2)
            handle = open({STDLIB_FILE!r})
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            except PermissionError:
                return True
            return True
        """,
    ),
    "fcntl_read_lock": (
        f"""
        import fcntl, struct, time
        def f(x: int):
            handle = open({STDLIB_FILE!r})
            try:
                fcntl.fcntl(handle, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0))
            except OSError:
                pass
            time.sleep(0.6)
            return True
        """,
        f"""
        import fcntl, struct, time
        def f(x: int):
            time.sleep(0.2)
            handle = open({STDLIB_FILE!r})
            try:
                found = fcntl.fcntl(handle, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
            except PermissionError:
                return True
            return struct.unpack("hhqqi", found)[0] == fcntl.F_UNLCK
        """,
    ),
    "inotify": (
        f"""
        import time
        def f(x: int):
            time.sleep(0.3)
            for _ in range(20):
                open({STDLIB_FILE!r}).close()
            return True
        """,
        f"""
        import ctypes, os, time
        def f(x: int):
            libc = ctypes.CDLL(None, use_errno=True)
            watcher = libc.inotify_init1(os.O_NONBLOCK)
            if watcher < 0:
                return True
            libc.inotify_add_watch(watcher, {STDLIB_FILE!r}.encode(), 0x20)  # IN_OPEN
            time.sleep(0.6)
            try:
                os.read(watcher, 4096)
                return False
            except BlockingIOError:
                return True
        """,
    ),
    # 5. counters of the whole machine, and its CPUs
    "shmem_counter": (
        """
        import time
        def f(x: int):
            time.sleep(0.2)
            for part in range(3):  # (a file may hold 16 MiB)
                with open(f"big{part}", "wb") as big:
                    big.write(b"x" * (15 << 20))
            time.sleep(0.6)
            return True
        """,
        """
        import time
        def shmem():
            with open("/proc/meminfo") as meminfo:
                return next(int(line.split()[1]) for line in meminfo if line.startswith("Shmem:"))
        def f(x: int):
            try:
                before = shmem()
                time.sleep(0.5)
                return shmem() - before < 24 << 10
            except OSError:
                return True
        """,
    ),
    "cpu_hog": (
        """
        import os, time
        def f(x: int):
            for _ in range(16):
                if os.fork() == 0:
                    try:
                        os.setsid()  # a scheduler autogroup of its own: a share of the CPUs of its own
                    except PermissionError:
                        pass
                    while True:
                        pass
            time.sleep(2.5)
            return True
        """,
        """
        def f(x: int):
            total = 0
            for number in range(3_000_000):  # about 0.3 s of CPU time on these cores
                total += number % 7
            return total > 0
        """,
    ),
    # 6. pools and counts of the whole machine: the aio events every process holds, the tasks of a uid
    "aio_pool": (
        f"""
        import ctypes, time
        def f(x: int):
            libc = ctypes.CDLL(None)
            held = []
            for size in [1 << power for power in range(15, -1, -1)]:  # every event of the pool it can get
                context = ctypes.c_ulong(0)
                while libc.syscall({IO_SETUP}, size, ctypes.byref(context)) == 0:
                    held.append(context)
                    context = ctypes.c_ulong(0)
            time.sleep(0.6)
            return True
        """,
        f"""
        import ctypes, time
        def f(x: int):
            time.sleep(0.2)
            libc = ctypes.CDLL(None, use_errno=True)
            context = ctypes.c_ulong(0)
            if libc.syscall({IO_SETUP}, 1, ctypes.byref(context)) == 0:
                return True
            return ctypes.get_errno() == 1  # refused: EPERM; the pool taken: EAGAIN
        """,
    ),
    "tasks_of_uid": (
        """
        import os, time
        def f(x: int):
            for _ in range(4):
                if os.fork() == 0:
                    time.sleep(0.6)
                    os._exit(0)
            time.sleep(0.6)
            return True
        """,
        """
        import os, resource, time
        def f(x: int):
            time.sleep(0.2)
            try:  # at most one more task of this uid, machine-wide: a fork fails while another holds more
                resource.setrlimit(resource.RLIMIT_NPROC, (2, 2))
            except PermissionError:
                return True
            try:
                child = os.fork()
            except BlockingIOError:
                return False
            if child == 0:
                os._exit(0)
            os.waitpid(child, 0)
            return True
        """,
    ),
}


@pytest.mark.parametrize("name", CONCURRENT)
@pytest.mark.parametrize("where", ["other_warden", "other_sandbox"])
def test_a_program_running_beside_another_is_judged_as_alone(name, where):
    sender, receiver = (probe(f) for f in CONCURRENT[name])
    expected = alone(receiver, timeout=FAST * 2)
    if where == "other_warden":
        with Sandbox(workers=2, timeout=FAST * 2) as box:
            assert box.isolation  # both wardens up: the two programs start together
            statuses = [v.status for v in box.verify([sender, receiver])]
    else:
        statuses = [None, None]
        with Sandbox(workers=1, timeout=FAST * 2) as first, Sandbox(workers=1, timeout=FAST * 2) as second:
            assert first.isolation and second.isolation
            sending = threading.Thread(target=lambda: statuses.__setitem__(0, first.verify([sender])[0].status))
            sending.start()
            statuses[1] = second.verify([receiver])[0].status
            sending.join()
    assert statuses[1] == expected, (name, statuses, expected)


# ---------------------------------------------------------------- what every program observes of its world


OBSERVED = """
import gc, os, resource
def observed():
    paths = ["/", "/dev", "/dev/null", "/etc", "/tmp", os.path.dirname(os.__file__), os.__file__]
    times = [[os.stat(path).st_mtime_ns, os.stat(path).st_atime_ns, os.stat(path).st_ino] for path in paths]
    limits = [resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name[:7] == "RLIMIT_"]
    ids = [os.getpid(), os.getppid(), os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()]
    collector = [gc.get_count(), gc.get_stats(), gc.get_freeze_count(), gc.isenabled(), gc.get_threshold()]
    return repr([times, limits, ids, collector, os.getcwd(), os.listdir("/tmp"), sorted(os.listdir("/dev"))])
"""
NEXT_TO_IT = [  # what programs before it may do to their world, and to their processes' state
    "import os\ndef g():\n    for n in range(3000):\n        os.close(os.open(str(n), os.O_CREAT))\n    return 1",
    "import gc\ndef g():\n    cycles = [[] for _ in range(5000)]\n    for cycle in cycles:\n"
    "        cycle.append(cycle)\n    del cycles\n    gc.collect()\n    return 1",
    # (a fork, where a program may fork: in the user world a program is one process, and the fork fails)
    "import os\ndef g():\n    try:\n        for _ in range(3):\n            if os.fork() == 0:\n"
    "                os._exit(0)\n    except OSError:\n        pass\n    return 1",
]


def observing(expected: str) -> Program:
    """g and f each observe their world; f passes if what both saw is `expected` (and prints it)."""
    f = f"{OBSERVED}def f(x):\n    seen = repr([x, observed()])\n    print(seen)\n    return seen == {expected!r}\n"
    return Program(f, f"{OBSERVED}def g():\n    return observed()\n", "str")


def test_every_program_observes_the_same_world():
    """Times of its root, /dev and /tmp, inode numbers, its ids, limits and collector state: the same for the first
    program of a warden as for any later one, on any warden, in any sandbox (the change times and device numbers
    are the next test's)."""
    with Sandbox(workers=1) as box:
        (first,) = box.verify([observing("")])
    alone = first.output.strip()
    checking = observing(alone)
    others = [Program("def f(x: int):\n    return x == 1\n", g) for g in NEXT_TO_IT]
    with Sandbox(workers=1) as box:  # after others on the same warden
        verdicts = box.verify([checking, *others, checking, *others, checking])
        assert [v.status for v in verdicts] == ["pass"] * len(verdicts), (alone, verdicts)
    with Sandbox(workers=2) as box:  # on either of two wardens, beside each other
        verdicts = box.verify([checking, *others] * 3)
        assert all(v.passed for v in verdicts), (alone, verdicts)


DEVICES = """
import os
def devices():
    return [os.stat(path).st_dev for path in ("/", "/dev", "/tmp")][:{count}]
"""


def test_device_numbers_are_fixed_per_warden_before_any_program():
    """The kernel draws each filesystem's device number from one pool of the machine's (the lowest free): a warden's
    root and /dev get theirs when it starts, each fresh /tmp the number its predecessor has just returned. f sees the
    numbers g saw, whatever ran before them. (Two wardens that remount /tmp within microseconds of each other can
    swap their numbers: beside another warden, only the root's and /dev's are held fixed.)"""
    others = [Program("def f(x: int):\n    return x == 1\n", g) for g in NEXT_TO_IT]
    for workers, count in ((1, 3), (2, 2)):
        source = DEVICES.format(count=count)
        checking = Program(
            f"{source}def f(x: List[int]):\n    return x == devices()\n", f"{source}def g():\n    return devices()\n"
        )
        with Sandbox(workers=workers) as box:
            verdicts = box.verify([checking, *others] * 3)
            assert all(v.passed for v in verdicts), verdicts


def test_the_world_a_program_leaves_is_freed_on_no_programs_clock():
    """An f that leaves 90,000 files in its /tmp: they are freed once its processes are gone, before the next
    program's clock starts (the next program's seconds are those it takes alone)."""
    leaving = (
        "import os\ndef f(x: int):\n    for n in range(90_000):\n        os.close(os.open(str(n), os.O_CREAT))\n"
        "    return x == 4\n"
    )
    plain = Program("def f(x: int):\n    return x == 4\n", "def g():\n    return 4\n")
    with Sandbox(workers=1, timeout=10.0) as box:
        verdicts = box.verify([plain, Program(leaving, "def g():\n    return 4\n"), plain])
    assert [v.status for v in verdicts] == ["pass"] * 3, verdicts
    assert verdicts[2].seconds < 0.05, verdicts  # (freeing them takes about 0.15 s)
