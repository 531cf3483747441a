"""The syscall filters of program processes. The main filter denies (EPERM) what would let a program reach kernel
state that outlives it or that another program can see: keyrings, SysV and POSIX IPC, other processes (ptrace and
its kin, pidfds), namespaces and mounts (both APIs), file locks, leases and watches (flock, fcntl's locks, dnotify,
inotify, fanotify), the page cache's state (mincore, readahead, fadvise, preadv2's flags, madvise's eviction and
merging), objects numbered machine-wide (pipes, sockets and memfds draw inode numbers from one counter), machine-wide
counters (sysinfo, the kernel log, other processes' priorities), new sessions (a scheduler autogroup), and signals
by fd ownership (F_SETOWN, FIOSETOWN)."""

import ctypes
import os
import struct

from .isolation import PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, _check, _libc

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {  # name: (x86_64, aarch64)
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),  # keyrings: per uid, host-wide
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "shmdt": (67, 197),  # SysV IPC
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    "mq_open": (240, 180),
    "mq_unlink": (241, 181),
    "mq_timedsend": (242, 182),  # POSIX message queues
    "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184),
    "mq_getsetattr": (245, 185),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),  # other processes
    "kcmp": (312, 272),
    "perf_event_open": (298, 241),
    "pidfd_open": (434, 434),
    "pidfd_getfd": (438, 438),
    "pidfd_send_signal": (424, 424),
    "process_madvise": (440, 440),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),  # namespaces, mounts
    "pivot_root": (155, 41),
    "bpf": (321, 280),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "open_tree": (428, 428),  # the new mount API
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "flock": (73, 32),  # locks and watches on files
    "inotify_init": (253, None),
    "inotify_init1": (294, 26),
    "inotify_add_watch": (254, 27),
    "fanotify_init": (300, 262),
    "fanotify_mark": (301, 263),
    "mincore": (27, 232),  # the page cache
    "readahead": (187, 213),
    "fadvise64": (221, 223),
    "preadv2": (327, 286),
    "pwritev2": (328, 287),
    "pipe": (22, None),  # inode numbers from one machine-wide counter
    "pipe2": (293, 59),
    "socket": (41, 198),
    "socketpair": (53, 199),
    "memfd_create": (319, 279),
    "memfd_secret": (447, 447),
    "sysinfo": (99, 179),  # machine-wide counters
    "syslog": (103, 116),
    "ioprio_get": (252, 31),
    "ioprio_set": (251, 30),
    "sched_setaffinity": (203, 122),
    "setsid": (112, 157),  # a new session is a new scheduler autogroup
}
DENIED = (  # in words, for the isolation report
    "keyrings, IPC, ptrace, namespaces or mounts, file locks, leases or watches, page-cache probes, "
    "pipes, sockets or memfds, machine-wide counters, new sessions, signals by fd ownership"
)
# (x86_64, aarch64) number, argument, its values (the low 32 bits), whether they are the only ones allowed
BY_ARGUMENT = {
    # only fd duplication and flags: no locks, leases, dnotify, owner or signal for SIGIO
    "fcntl": ((72, 25), 1, (0, 1, 2, 3, 4, 1030, 1031, 1032), True),
    # no eviction (COLD, PAGEOUT), no read-ahead (WILLNEED), no same-page merging across processes (MERGEABLE)
    "madvise": ((28, 233), 2, (0, 1, 2, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19), True),
    "ioctl": ((16, 29), 1, (0x8901, 0x8902, 0x5410, 0x5412), False),  # FIOSETOWN, SIOCSPGRP, TIOCSPGRP, TIOCSTI
    "prctl": ((157, 167), 0, (67,), False),  # PR_SET_MEMORY_MERGE: same-page merging of the whole process
}
SIGNALLING = {
    "kill": (62, 129),
    "tkill": (200, 130),
    "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
}
CLONE, CLONE3 = {"x86_64": 56, "aarch64": 220}, 435
NAMESPACE_FLAGS = 0x7E020080  # clone's CLONE_NEW* flags: NS, CGROUP, UTS, IPC, USER, PID, NET, TIME
EPERM, ENOSYS = 1, 38
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
LOAD, JUMP_EQUAL, JUMP_AT_LEAST, JUMP_ANY_BIT, RETURN = 0x20, 0x15, 0x35, 0x45, 0x06  # classic BPF opcodes


def _bpf(code: int, true: int, false: int, value: int) -> bytes:
    return struct.pack("=HBBI", code, true, false, value)


def _by_argument(number: int, argument: int, values: tuple[int, ...], allowed: bool) -> list[bytes]:
    """For syscall `number`: EPERM unless its `argument` is one of `values` (`allowed`), or if it is one (not
    `allowed`); everything else falls through to the next rule."""
    match, other = (RET_ALLOW, RET_ERRNO | EPERM) if allowed else (RET_ERRNO | EPERM, RET_ALLOW)
    body = [_bpf(LOAD, 0, 0, 16 + 8 * argument)]  # the argument's low 32 bits (little-endian)
    body += [_bpf(JUMP_EQUAL, len(values) - index, 0, value) for index, value in enumerate(values)]
    body += [_bpf(RETURN, 0, 0, other), _bpf(RETURN, 0, 0, match)]
    return [_bpf(JUMP_EQUAL, 0, len(body), number), *body]


ZYGOTE_NEEDS = ("unshare", "setns", "mount", "umount2", "pipe", "pipe2")  # to make each program process's world


def _program(rules) -> bytes | None:
    """A seccomp program of `rules(column, machine)` between the architecture check and ALLOW: None on an
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
    return b"".join(header + rules(0 if machine == "x86_64" else 1, machine) + [_bpf(RETURN, 0, 0, RET_ALLOW)])


def _denials(names, column: int) -> list[bytes]:
    rules = []
    for name in names:
        if SYSCALLS[name][column] is not None:  # (aarch64 has no inotify_init or pipe, only their newer forms)
            rules += [_bpf(JUMP_EQUAL, 0, 1, SYSCALLS[name][column]), _bpf(RETURN, 0, 0, RET_ERRNO | EPERM)]
    return rules


def seccomp_filter(exempt: tuple[str, ...] = ()) -> bytes | None:
    """The main filter: EPERM for the syscalls of `SYSCALLS` (but those `exempt`), the argument values of
    `BY_ARGUMENT` and clone with a namespace flag; ENOSYS for clone3, so that the C library falls back to clone.
    The zygote runs it with ZYGOTE_NEEDS exempt (loading a filter costs more than forking with one: each program
    process inherits it), and each program process adds `denial_filter(ZYGOTE_NEEDS)`."""

    def rules(column: int, machine: str) -> list[bytes]:
        found = _denials([name for name in SYSCALLS if name not in exempt], column)
        for numbers, argument, values, allowed in BY_ARGUMENT.values():
            found += _by_argument(numbers[column], argument, values, allowed)
        return found + [
            _bpf(JUMP_EQUAL, 0, 1, CLONE3),
            _bpf(RETURN, 0, 0, RET_ERRNO | ENOSYS),
            _bpf(JUMP_EQUAL, 0, 3, CLONE[machine]),
            _bpf(LOAD, 0, 0, 16),  # clone's flags
            _bpf(JUMP_ANY_BIT, 0, 1, NAMESPACE_FLAGS),
            _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
        ]

    return _program(rules)


def denial_filter(names: tuple[str, ...]) -> bytes | None:
    """EPERM for the syscalls `names` (of `SYSCALLS`), nothing else."""
    return _program(lambda column, machine: _denials(names, column))


def signal_filter(pid: int) -> bytes | None:
    """EPERM for a signal to any process but `pid` and its process group: without namespaces, where program
    processes have the uid of the warden, the zygote and the supervisor."""

    def rules(column: int, machine: str) -> list[bytes]:
        found = []
        for numbers in SIGNALLING.values():  # the target (pid, or -group) is the first argument
            found += [
                _bpf(JUMP_EQUAL, 0, 6, numbers[column]),
                _bpf(LOAD, 0, 0, 16),
                _bpf(JUMP_EQUAL, 2, 0, 0),
                _bpf(JUMP_EQUAL, 1, 0, pid),
                _bpf(JUMP_EQUAL, 0, 1, -pid & 0xFFFFFFFF),
                _bpf(RETURN, 0, 0, RET_ALLOW),
                _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
            ]
        return found

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
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(_libc.prctl(PR_SET_SECCOMP, 2, self.pointer, 0, 0), "seccomp")


def install_seccomp(program: bytes) -> None:
    Filter(program).install()
