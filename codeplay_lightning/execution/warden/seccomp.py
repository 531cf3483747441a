"""The syscall filters of program processes."""

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


def seccomp_filter(only_signal: int | None = None) -> bytes | None:
    """A seccomp program (None on an architecture it does not know). By default it denies the
    syscalls of `SYSCALLS` (EPERM), clone with a namespace flag (EPERM) and clone3 (ENOSYS, so
    that the C library falls back to clone); with `only_signal=pid`, it denies signals to any
    process but `pid` and its process group instead. Any other ABI (x86's int 0x80, x32) kills."""
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        return None
    column = 0 if machine == "x86_64" else 1
    program = [
        _bpf(LOAD, 0, 0, 4),
        _bpf(JUMP_EQUAL, 1, 0, AUDIT_ARCH[machine]),
        _bpf(RETURN, 0, 0, RET_KILL_PROCESS),
        _bpf(LOAD, 0, 0, 0),
        _bpf(JUMP_AT_LEAST, 0, 1, 0x40000000),
        _bpf(RETURN, 0, 0, RET_KILL_PROCESS),
    ]
    if only_signal is None:
        for numbers in SYSCALLS.values():
            program += [_bpf(JUMP_EQUAL, 0, 1, numbers[column]), _bpf(RETURN, 0, 0, RET_ERRNO | EPERM)]
        program += [
            _bpf(JUMP_EQUAL, 0, 1, CLONE3),
            _bpf(RETURN, 0, 0, RET_ERRNO | ENOSYS),
            _bpf(JUMP_EQUAL, 0, 3, CLONE[machine]),
            _bpf(LOAD, 0, 0, 16),  # clone's flags
            _bpf(JUMP_ANY_BIT, 0, 1, NAMESPACE_FLAGS),
            _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
        ]
    else:
        for numbers in SIGNALLING.values():  # the target (pid, or -group) is the first argument
            program += [
                _bpf(JUMP_EQUAL, 0, 6, numbers[column]),
                _bpf(LOAD, 0, 0, 16),
                _bpf(JUMP_EQUAL, 2, 0, 0),
                _bpf(JUMP_EQUAL, 1, 0, only_signal),
                _bpf(JUMP_EQUAL, 0, 1, -only_signal & 0xFFFFFFFF),
                _bpf(RETURN, 0, 0, RET_ALLOW),
                _bpf(RETURN, 0, 0, RET_ERRNO | EPERM),
            ]
    return b"".join(program + [_bpf(RETURN, 0, 0, RET_ALLOW)])


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install_seccomp(program: bytes) -> None:
    """Install a seccomp program on this process and every process it forks from now on."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_char_p))
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0), "seccomp")
