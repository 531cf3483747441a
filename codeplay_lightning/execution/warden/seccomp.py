"""The syscall filters of program processes: an allowlist. A program process may make the syscalls of `SYSCALLS`
(each with the reason it needs it, found by tracing honest programs: the bundled puzzles, the corpus's families,
Code World Models with numpy, threads and forks), some only with the arguments of `ONE_OF` and `NONE_OF`; every
other syscall fails with EPERM, whatever its number, those added to Linux after this table was written included.
Two fail with ENOSYS instead (`ABSENT`), so that the C library uses the older form they replace."""

import ctypes
import os
import struct

from .isolation import PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, check, libc

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {  # name: (x86_64, aarch64, why); None: the architecture has only the newer form (the *at call)
    # memory
    "brk": (12, 214, "the allocator"),
    "mmap": (9, 222, "the allocator, extension modules (not MAP_HUGETLB: NONE_OF)"),
    "munmap": (11, 215, "the allocator"),
    "mremap": (25, 216, "growing a large list or array"),
    "mprotect": (10, 226, "extension modules, thread stacks' guard pages"),
    "madvise": (28, 233, "returning freed memory (the advice of ONE_OF)"),
    "mbind": (237, 235, "OpenBLAS (numpy): the memory policy of its own buffers"),
    # files: the read-only root and its own /tmp
    "read": (0, 63, "files, its request pipe"),
    "write": (1, 64, "files, its reply pipe"),
    "readv": (19, 65, "files"),
    "writev": (20, 66, "files"),
    "pread64": (17, 67, "files"),
    "pwrite64": (18, 68, "files"),
    "lseek": (8, 62, "files"),
    "open": (2, None, "files (older C libraries)"),
    "openat": (257, 56, "files, imports"),
    "close": (3, 57, "files"),
    "newfstatat": (262, 79, "os.stat, imports"),
    "fstat": (5, 80, "os.fstat (older C libraries)"),
    "stat": (4, None, "os.stat (older C libraries)"),
    "lstat": (6, None, "os.lstat (older C libraries)"),
    "getdents64": (217, 61, "os.listdir, imports"),
    "getcwd": (79, 17, "os.getcwd, imports"),
    "chdir": (80, 49, "os.chdir"),
    "fchdir": (81, 50, "os.chdir"),
    "mkdir": (83, None, "os.mkdir"),
    "mkdirat": (258, 34, "os.mkdir"),
    "rmdir": (84, None, "os.rmdir"),
    "unlink": (87, None, "os.remove"),
    "unlinkat": (263, 35, "os.remove, shutil.rmtree"),
    "rename": (82, None, "os.rename"),
    "renameat": (264, 38, "os.rename"),
    "renameat2": (316, 276, "os.rename"),
    "link": (86, None, "os.link"),
    "linkat": (265, 37, "os.link"),
    "symlink": (88, None, "os.symlink"),
    "symlinkat": (266, 36, "os.symlink"),
    "readlink": (89, None, "os.readlink, os.path.realpath"),
    "readlinkat": (267, 78, "os.readlink, os.path.realpath"),
    "access": (21, None, "os.access"),
    "faccessat": (269, 48, "os.access"),
    "faccessat2": (439, 439, "os.access"),
    "chmod": (90, None, "os.chmod"),
    "fchmod": (91, 52, "os.chmod"),
    "fchmodat": (268, 53, "os.chmod"),
    "utimensat": (280, 88, "os.utime"),
    "truncate": (76, 45, "os.truncate"),
    "ftruncate": (77, 46, "file.truncate"),
    "fsync": (74, 82, "os.fsync"),
    "fdatasync": (75, 83, "os.fdatasync"),
    "umask": (95, 166, "os.umask"),
    "sendfile": (40, 71, "shutil.copyfile"),
    "copy_file_range": (326, 285, "shutil.copyfile"),
    "getxattr": (191, 8, "shutil.copy2, shutil.copytree: the attributes to copy"),
    "lgetxattr": (192, 9, "shutil.copy2, shutil.copytree"),
    "fgetxattr": (193, 10, "shutil.copy2, shutil.copytree"),
    "listxattr": (194, 11, "shutil.copy2, shutil.copytree"),
    "llistxattr": (195, 12, "shutil.copy2, shutil.copytree"),
    "flistxattr": (196, 13, "shutil.copy2, shutil.copytree"),
    "poll": (7, None, "select.poll on its own fds"),
    "ppoll": (271, 73, "select.poll on its own fds"),
    "select": (23, None, "select.select on its own fds, or as a sleep"),
    "pselect6": (270, 72, "select.select on its own fds, or as a sleep"),
    "dup": (32, 23, "os.dup"),
    "dup2": (33, None, "os.dup2"),
    "dup3": (292, 24, "os.dup2"),
    "fcntl": (72, 25, "fd flags, os.set_blocking (the commands of ONE_OF)"),
    "ioctl": (16, 29, "isatty when a file is opened, os.set_inheritable (those only: ONE_OF)"),
    # processes and threads
    "clone": (56, 220, "threads and fork (their flags only: NONE_OF; threads only in the user world)"),
    "wait4": (61, 260, "os.waitpid"),
    "waitid": (247, 95, "os.waitid"),
    "exit": (60, 93, "a thread's end"),
    "exit_group": (231, 94, "the end"),
    "set_robust_list": (273, 99, "a new thread or child (glibc)"),
    "rseq": (334, 293, "a new thread (glibc)"),
    "futex": (202, 98, "locks, threads"),
    "sched_yield": (24, 124, "threads (OpenBLAS's wait for work)"),
    "sched_getaffinity": (204, 123, "os.sched_getaffinity, os.cpu_count"),
    "getpid": (39, 172, "os.getpid"),
    "getppid": (110, 173, "os.getppid"),
    "gettid": (186, 178, "threads"),
    "getuid": (102, 174, "os.getuid"),
    "geteuid": (107, 175, "os.geteuid"),
    "getgid": (104, 176, "os.getgid"),
    "getegid": (108, 177, "os.getegid"),
    "getgroups": (115, 158, "os.getgroups"),
    "getresuid": (118, 148, "os.getresuid"),
    "getresgid": (120, 150, "os.getresgid"),
    "kill": (62, 129, "os.kill of its own processes (a pid namespace names no other)"),
    "tkill": (200, 130, "signals to its own threads"),
    "tgkill": (234, 131, "signal.pthread_kill, abort"),
    "prlimit64": (302, 261, "resource.getrlimit: its own limits, read only (program_filter)"),
    "getrusage": (98, 165, "resource.getrusage"),
    "times": (100, 153, "os.times"),
    # signals
    "rt_sigaction": (13, 134, "signal.signal"),
    "rt_sigprocmask": (14, 135, "threads, signal.pthread_sigmask"),
    "rt_sigreturn": (15, 139, "the return from any signal handler"),
    "sigaltstack": (131, 132, "faulthandler"),
    "rt_sigpending": (127, 136, "signal.sigpending"),
    "rt_sigsuspend": (130, 133, "signal.pause"),
    "rt_sigtimedwait": (128, 137, "signal.sigwait"),
    "pause": (34, None, "signal.pause"),
    "alarm": (37, None, "signal.alarm"),
    "setitimer": (38, 103, "signal.setitimer, signal.alarm"),
    "getitimer": (36, 102, "signal.getitimer"),
    "restart_syscall": (219, 128, "a sleep interrupted by a signal"),
    # time, randomness
    "clock_gettime": (228, 113, "time.time, time.process_time (where the vDSO does not answer)"),
    "clock_getres": (229, 114, "time.get_clock_info"),
    "gettimeofday": (96, 169, "the time (older C libraries)"),
    "time": (201, None, "the time (older C libraries)"),
    "nanosleep": (35, 101, "time.sleep (older C libraries)"),
    "clock_nanosleep": (230, 115, "time.sleep"),
    "getrandom": (318, 278, "os.urandom, random's seed"),
    "uname": (63, 160, "platform, os.uname"),
    # the zygote's, to build each program process's world (ZYGOTE_NEEDS): refused to the program itself
    "unshare": (272, 97, "the zygote: a pid namespace for the next program process"),
    "setns": (308, 268, "the zygote: back to its own pid namespace"),
    "mount": (165, 40, "the zygote: a fresh /tmp"),
    "umount2": (166, 39, "the zygote: the last /tmp, detached"),
    "pipe2": (293, 59, "the zygote: a program process's two pipes"),
    "sendmsg": (46, 211, "the zygote: the pipes, to the warden"),
    "sendto": (44, 206, "the zygote: its replies to the warden"),
    "recvfrom": (45, 207, "the zygote: the warden's commands"),
    "setpgid": (109, 154, "a program process's own process group"),
    "setgroups": (116, 159, "a program process's uid, as root"),
    "setgid": (106, 144, "a program process's uid, as root"),
    "setuid": (105, 146, "a program process's uid, as root"),
    "capset": (126, 91, "no capabilities, in a user namespace"),
    "prctl": (157, 167, "no capabilities, and the program process's own filters"),
    "close_range": (436, 436, "a program process's fds: its two pipes only"),
}
ZYGOTE_NEEDS = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pipe2",
    "sendmsg",
    "sendto",
    "recvfrom",
    "setpgid",
    "setgroups",
    "setgid",
    "setuid",
    "capset",
    "prctl",
    "close_range",
)
ABSENT = {  # ENOSYS: as on a kernel without them
    "clone3": (435, 435),  # its flags are in memory, out of a filter's reach: glibc then uses clone
    "statx": (332, 291),  # it gives a mount id whatever its mask (mount ids count mounts machine-wide)
}
ONE_OF = {  # name: (argument, its only values allowed (the low 32 bits))
    # fd duplication and flags: no locks, leases, dnotify, owner, signal for SIGIO or pipe size
    "fcntl": (1, (0, 1, 2, 3, 4, 1030)),
    # no eviction (COLD, PAGEOUT), no read-ahead (WILLNEED), no same-page merging across processes (MERGEABLE)
    "madvise": (2, (0, 1, 2, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19)),
    "ioctl": (1, (0x5401, 0x5450, 0x5451)),  # TCGETS (isatty), FIONCLEX and FIOCLEX (os.set_inheritable)
}
# CLONE_VM, FS, FILES, SIGHAND, THREAD, SYSVSEM, SETTLS, PARENT_SETTID, CHILD_CLEARTID, CHILD_SETTID, the exit signal
CLONE_THREAD_AND_FORK = 0x013D0FFF
CLONE_THREAD = 0x00010000
NONE_OF = {  # name: (argument, bits it may not have (the low 32 bits))
    "mmap": (3, 0x40000),  # MAP_HUGETLB: the hugepage pool is the machine's
    # what glibc's threads and fork use, nothing else: no CLONE_PIDFD (a pidfd's inode number is a machine-wide
    # count of processes), no namespaces, CLONE_PARENT, CLONE_VFORK (no exec) or CLONE_PTRACE
    "clone": (0, ~CLONE_THREAD_AND_FORK & 0xFFFFFFFF),
}
SIGNALLING = ("kill", "tkill", "tgkill")
COLUMN = 0 if os.uname().machine == "x86_64" else 1  # this machine's numbers in SYSCALLS

EPERM, ENOSYS = 1, 38
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
LOAD, JUMP_EQUAL, JUMP_AT_LEAST, JUMP_ANY_BIT, RETURN = 0x20, 0x15, 0x35, 0x45, 0x06  # classic BPF opcodes


def allowed(threads_only: bool) -> str:
    """The allowlist in words, for the isolation report."""
    size = sum(numbers[COLUMN] is not None for name, numbers in SYSCALLS.items() if name not in ZYGOTE_NEEDS)
    processes = "threads" if threads_only else "threads and fork"
    return (
        f"an allowlist of {size} syscalls (files, memory, {processes}, signals, the time), all else refused: no IPC, "
        "sockets, pipes, keyrings, ptrace, pidfds, namespaces, mounts, locks, watches, page-cache probes, aio, limits "
        "set"
    )


def _bpf(code: int, true: int, false: int, value: int) -> bytes:
    return struct.pack("=HBBI", code, true, false, value)


def _low(argument: int) -> int:
    """The offset of an argument's low 32 bits in seccomp_data (little-endian)."""
    return 16 + 8 * argument


def _program(rules) -> bytes | None:
    """A seccomp program of `rules(column)` (which end with a RETURN) after the architecture check: None on an
    architecture it does not know; any other ABI (x86's int 0x80, x32) kills."""
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        return None
    header = [
        _bpf(LOAD, 0, 0, 4),
        _bpf(JUMP_EQUAL, 1, 0, AUDIT_ARCH[machine]),
        _bpf(RETURN, 0, 0, RET_KILL_PROCESS),
        _bpf(LOAD, 0, 0, 0),
        _bpf(JUMP_AT_LEAST, 0, 1, 0x40000000),
        _bpf(RETURN, 0, 0, RET_KILL_PROCESS),
    ]
    return b"".join(header + rules(COLUMN))


def zygote_filter() -> bytes | None:
    """The allowlist, ZYGOTE_NEEDS included: loaded once by the zygote, inherited by every program process (loading
    a filter costs more than forking with one), which then adds `program_filter()`. The syscalls with argument rules
    come first (mmap's is the one a program makes often); the kernel (5.11 and later) caches the verdict of every
    other allowed number, which then costs nothing."""

    def rules(column: int) -> list[bytes]:
        found = []
        for numbers in ABSENT.values():
            found += [_bpf(JUMP_EQUAL, 0, 1, numbers[column]), _bpf(RETURN, 0, 0, RET_ERRNO | ENOSYS)]
        for name, (argument, bits) in NONE_OF.items():
            found += [
                _bpf(JUMP_EQUAL, 0, 4, SYSCALLS[name][column]),
                _bpf(LOAD, 0, 0, _low(argument)),
                _bpf(JUMP_ANY_BIT, 0, 1, bits),
                _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
                _bpf(RETURN, 0, 0, RET_ALLOW),
            ]
        for name, (argument, values) in ONE_OF.items():
            body = [_bpf(LOAD, 0, 0, _low(argument))]
            body += [_bpf(JUMP_EQUAL, len(values) - index, 0, value) for index, value in enumerate(values)]
            body += [_bpf(RETURN, 0, 0, RET_ERRNO | EPERM), _bpf(RETURN, 0, 0, RET_ALLOW)]
            found += [_bpf(JUMP_EQUAL, 0, len(body), SYSCALLS[name][column]), *body]
        plain = sorted(
            numbers[column]
            for name, numbers in SYSCALLS.items()
            if numbers[column] is not None and name not in ONE_OF and name not in NONE_OF
        )
        found += [_bpf(JUMP_EQUAL, len(plain) - index, 0, number) for index, number in enumerate(plain)]
        return found + [_bpf(RETURN, 0, 0, RET_ERRNO | EPERM), _bpf(RETURN, 0, 0, RET_ALLOW)]

    return _program(rules)


def _denials(names, column: int) -> list[bytes]:
    rules = []
    for name in names:
        if SYSCALLS[name][column] is not None:
            rules += [_bpf(JUMP_EQUAL, 0, 1, SYSCALLS[name][column]), _bpf(RETURN, 0, 0, RET_ERRNO | EPERM)]
    return rules


def program_filter(threads_only: bool) -> bytes | None:
    """What each program process adds to the zygote's filter once its world is built: EPERM for ZYGOTE_NEEDS, and
    for prlimit64 but to read its own limits (another process's, or setting any: a lowered RLIMIT_NPROC tells how
    many tasks its uid holds machine-wide). `threads_only`: EPERM for a clone without CLONE_THREAD too, so that a
    program is one process (where no cgroup bounds its processes together, its limits are then its process's)."""

    def rules(column: int) -> list[bytes]:
        one_process = [
            _bpf(JUMP_EQUAL, 0, 4, SYSCALLS["clone"][column]),
            _bpf(LOAD, 0, 0, _low(0)),  # the flags
            _bpf(JUMP_ANY_BIT, 1, 0, CLONE_THREAD),
            _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
            _bpf(RETURN, 0, 0, RET_ALLOW),
        ]
        return (
            _denials(ZYGOTE_NEEDS, column)
            + (one_process if threads_only else [])
            + [
                _bpf(JUMP_EQUAL, 0, 7, SYSCALLS["prlimit64"][column]),
                _bpf(LOAD, 0, 0, _low(0)),  # the pid: 0, itself
                _bpf(JUMP_EQUAL, 0, 4, 0),
                _bpf(LOAD, 0, 0, _low(2)),  # the new limits: NULL
                _bpf(JUMP_EQUAL, 0, 2, 0),
                _bpf(LOAD, 0, 0, _low(2) + 4),
                _bpf(JUMP_EQUAL, 1, 0, 0),
                _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
                _bpf(RETURN, 0, 0, RET_ALLOW),
            ]
        )

    return _program(rules)


def denial_filter(names: tuple[str, ...]) -> bytes | None:
    """EPERM for the syscalls `names` (of `SYSCALLS`), nothing else."""
    return _program(lambda column: _denials(names, column) + [_bpf(RETURN, 0, 0, RET_ALLOW)])


def signal_filter(pid: int) -> bytes | None:
    """EPERM for a signal to any process but `pid` and its process group: without namespaces, where program
    processes have the uid of the warden, the zygote and the supervisor."""

    def rules(column: int) -> list[bytes]:
        found = []
        for name in SIGNALLING:  # the target (pid, or -group) is the first argument
            found += [
                _bpf(JUMP_EQUAL, 0, 6, SYSCALLS[name][column]),
                _bpf(LOAD, 0, 0, _low(0)),
                _bpf(JUMP_EQUAL, 2, 0, 0),
                _bpf(JUMP_EQUAL, 1, 0, pid),
                _bpf(JUMP_EQUAL, 0, 1, -pid & 0xFFFFFFFF),
                _bpf(RETURN, 0, 0, RET_ALLOW),
                _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
            ]
        return found + [_bpf(RETURN, 0, 0, RET_ALLOW)]

    return _program(rules)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


class Filter:
    """A seccomp program made ready to install (by the zygote, once: a program process then only installs it)."""

    def __init__(self, program: bytes):
        self.buffer = ctypes.create_string_buffer(program, len(program))
        self.fprog = _SockFprog(len(program) // 8, ctypes.cast(self.buffer, ctypes.c_char_p))
        self.pointer = ctypes.byref(self.fprog)

    def install(self) -> None:
        """On this process and every process it forks from now on."""
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        check(libc.prctl(PR_SET_SECCOMP, 2, self.pointer, 0, 0), "seccomp")


def install_seccomp(program: bytes) -> None:
    Filter(program).install()
