"""The world a warden builds for its programs: a root of its own on a tmpfs, each program process's own mount and pid
namespaces with a fresh /tmp, the cgroups that bound a program, and the deletion of what programs leave without
root."""

import ctypes
import os
import stat
import struct
import sysconfig
import time

TMP_SIZE = "64m"  # each program process's fresh /tmp
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 36, 38
PR_CAPBSET_DROP, LAST_CAPABILITY = 24, 63
DEVICES = {"null": (1, 3), "zero": (1, 5), "random": (1, 8), "urandom": (1, 9)}  # (major, minor)
# parts of the stdlib no program needs: its tests, IDE and GUI, the bundled pip, build files (and site-packages,
# whose packages reach programs only as `modules`)
STDLIB_LEFT_OUT = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data"}
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr links, kept as links
ROOT = "/tmp/root"  # where `build_root` makes the root, under a tmpfs that hides the host's /tmp
# the access and modification time of every directory, link and device a program can see, and of each fresh /tmp
# (files keep the host's: their bytecode caches are checked against them); no syscall sets a change time
EPOCH_NS = 946_684_800 * 10**9  # 2000-01-01


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    check(libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def _mount_tmp(target: str) -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMP_SIZE},mode=1777")


# ---------------------------------------------------------------- the root


def root_files(stdlib: str, module_dirs: list[str]) -> list[str]:
    """Every file and link a program may need to read: the stdlib (without STDLIB_LEFT_OUT, its tests and optimised
    bytecode), the offered packages, and the shared libraries their extension modules load, with what those load
    (`shared_libraries`). Absolute paths, as the host has them."""
    files = []
    for top in [stdlib, *module_dirs]:
        for directory, subdirectories, names in os.walk(top):
            subdirectories[:] = sorted(
                name
                for name in subdirectories
                if name not in ("test", "tests", "idle_test")
                and not (directory == stdlib and (name in STDLIB_LEFT_OUT or name.startswith("config-")))
            )
            files += [os.path.join(directory, name) for name in sorted(names) if ".opt-" not in name]
    extensions = [path for path in files if ".so" in os.path.basename(path) and not os.path.islink(path)]
    return files + shared_libraries(extensions)


def build_root(stdlib: str, module_dirs: list[str], as_root: bool) -> str:
    """A read-only root of the warden's own on a tmpfs, returned as a path to chroot into. It holds copies of
    `root_files` at their own paths, /dev with null, zero, random and urandom (device nodes of its own `as_root`;
    the host's, bound, in a user namespace, where no device node can be made), and a /tmp (the zygote mounts a
    fresh one for each program process). Nothing else: no /proc, /etc, /usr/bin, home directories, /run or /var.
    On a tmpfs every
    page of every file is in memory and every inode is the warden's: nothing a program reads or does changes what
    another one finds cached, and no lock, lease or watch on these files can reach the host or another warden."""
    files = [_real_directory(path) for path in root_files(stdlib, module_dirs)]  # while the host's /tmp is seen
    sizes = sum(os.lstat(path).st_size for path in files)
    # the host's files, read through these after its /tmp is hidden below (a venv may live in it): a walk from the
    # root would cross into the tmpfs mounted on /tmp; one from the old /tmp's own descriptor stays under it
    host = {"/": os.open("/", os.O_PATH | os.O_DIRECTORY), "/tmp/": os.open("/tmp", os.O_PATH | os.O_DIRECTORY)}
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")  # host /tmp hidden too
    root = ROOT
    os.mkdir(root)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={sizes + (16 << 20)},mode=755")
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
    for path in files:
        _copy(host, path, root)
    for descriptor in host.values():
        os.close(descriptor)
    for path in ("/tmp", "/etc", "/dev"):
        os.makedirs(root + path, 0o755, exist_ok=True)
    _mount_tmp(root + "/tmp")
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16k,mode=755")
    for device, (major, minor) in DEVICES.items():
        if as_root:
            os.mknod(f"{root}/dev/{device}", 0o20666, os.makedev(major, minor))
        else:
            open(f"{root}/dev/{device}", "w").close()
            _mount(f"/dev/{device}", f"{root}/dev/{device}", None, MS_BIND)
    _settle_times(root, as_root)
    _mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return root


def _settle_times(root: str, as_root: bool) -> None:
    """Every directory, link and device of the root (its /tmp and /dev too) at EPOCH_NS: no time a program can read
    tells when its warden started. Files have the host's times (`_copy`); in a user namespace the devices are the
    host's own, bound."""
    for directory, subdirectories, names in os.walk(root, topdown=False):  # a directory once it is listed
        for name in subdirectories + names:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or (stat.S_ISCHR(mode) and not as_root)):
                os.utime(path, ns=(EPOCH_NS, EPOCH_NS), follow_symlinks=False)
    os.utime(root, ns=(EPOCH_NS, EPOCH_NS))


def _copy(host: dict[str, int], path: str, root: str) -> None:
    """The file or link at `path`, whose directories are links no more (read through `host`: the host's root, and
    its /tmp), copied to the same path under `root`."""
    target = root + path
    os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
    if os.path.lexists(target):
        return
    prefix = "/tmp/" if path.startswith("/tmp/") else "/"
    directory, relative = host[prefix], path.removeprefix(prefix)
    mode = os.lstat(relative, dir_fd=directory).st_mode
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(relative, dir_fd=directory), target)
        return
    source = os.open(relative, os.O_RDONLY, dir_fd=directory)
    copy = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o755)
    try:
        while os.sendfile(copy, source, None, 1 << 30):
            pass
        modified = os.fstat(source).st_mtime_ns  # the host's, as access time too (the host's changes with reads)
        os.utime(copy, ns=(modified, modified))
    finally:
        os.close(source)
        os.close(copy)


def _real_directory(path: str) -> str:
    """`path` with its directories' links resolved (its own name kept: a link stays a link)."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


ELF_HEADER = struct.Struct("<4s12xHHIQQQIHHHHHH")  # 64-bit little-endian
PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")
DYNAMIC_ENTRY = struct.Struct("<qQ")
PT_LOAD, PT_DYNAMIC, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 1, 2, 1, 5, 15, 29


def needed_libraries(path: str) -> tuple[list[str], list[str]]:
    """(DT_NEEDED names, RPATH and RUNPATH directories with $ORIGIN resolved) of a 64-bit little-endian ELF shared
    object; ([], []) for anything else."""
    with open(path, "rb") as elf:
        header = elf.read(ELF_HEADER.size)
        if len(header) < ELF_HEADER.size or header[:6] != b"\x7fELF\x02\x01":
            return [], []
        fields = ELF_HEADER.unpack(header)
        program_offset, entry_size, entries = fields[5], fields[9], fields[10]
        elf.seek(program_offset)
        segments = [PROGRAM_HEADER.unpack(elf.read(entry_size)[: PROGRAM_HEADER.size]) for _ in range(entries)]
        loads = [(vaddr, offset, size) for kind, _, offset, vaddr, _, size, _, _ in segments if kind == PT_LOAD]
        dynamic = [(offset, size) for kind, _, offset, _, _, size, _, _ in segments if kind == PT_DYNAMIC]
        if not dynamic:
            return [], []
        elf.seek(dynamic[0][0])
        table = elf.read(dynamic[0][1])
        tags = [DYNAMIC_ENTRY.unpack_from(table, at) for at in range(0, len(table) - 15, DYNAMIC_ENTRY.size)]
        strings = next((value for tag, value in tags if tag == DT_STRTAB), None)
        within = [at + strings - start for start, at, size in loads if strings and start <= strings < start + size]
        if not within:
            return [], []
        table_offset = within[0]

        def text(at: int) -> str:
            elf.seek(table_offset + at)
            return elf.read(4096).split(b"\0", 1)[0].decode("utf-8", "replace")

        needed = [text(value) for tag, value in tags if tag == DT_NEEDED]
        origin = os.path.dirname(os.path.realpath(path))
        paths = [
            part.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
            for tag, value in tags
            if tag in (DT_RPATH, DT_RUNPATH)
            for part in text(value).split(":")
            if part
        ]
        return needed, paths


def shared_libraries(objects: list[str]) -> list[str]:
    """The shared libraries that loading `objects` loads (their DT_NEEDED, transitively), as the dynamic loader
    finds them in a root without /etc/ld.so.cache: in the object's RPATH or RUNPATH, then the system's own
    directories. Those this process has mapped already (the interpreter's own) are left out: the loader finds them
    loaded. Each with the links that lead to it."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    system = [f"/lib/{multiarch}", f"/usr/lib/{multiarch}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    with open("/proc/self/maps") as maps:
        loaded = {os.path.basename(line.split(maxsplit=5)[-1].strip()) for line in maps if "/" in line}
    found, pending, seen = [], list(objects), set(objects)
    while pending:
        needed, paths = needed_libraries(pending.pop())
        for name in needed:
            if name in loaded:
                continue
            candidates = [os.path.join(directory, name) for directory in [*paths, *system]]
            path = next((candidate for candidate in candidates if os.path.exists(candidate)), None)
            if path is None or path in seen:
                continue
            seen.add(path)
            found += [path] + ([os.path.realpath(path)] if os.path.islink(path) else [])
            pending.append(os.path.realpath(path))
    return found


# ---------------------------------------------------------------- one program process


def fresh_tmp() -> None:
    """A new tmpfs over /tmp, for the next program process to work in (the zygote's, once the last one's processes
    are gone, on no program's clock): the old one and everything in it are freed here. A program never sees what
    another left in a /tmp, nor the inode numbers, times or free space it left them at."""
    check(libc.umount2(b"/tmp", MNT_DETACH), "umount /tmp")
    _mount_tmp("/tmp")
    os.utime("/tmp", ns=(EPOCH_NS, EPOCH_NS))


def drop_capabilities() -> None:
    """Every capability, for good: in a user namespace the warden's processes hold all of them there."""
    for capability in range(LAST_CAPABILITY + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # EINVAL past the kernel's last one
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    check(libc.capset(header, bytes(24)), "capset")


# ---------------------------------------------------------------- cgroups


class Cgroup:
    """The cgroup(s) of one warden's zygote and so of every process it forks: memory and process count bounded per
    program (one program's processes run under a warden at a time), and its CPU time counted: the clock of a
    program's verdict. cgroup v2 when the warden's parent cgroup delegates memory and pids, else cgroup v1's
    hierarchies (without cpuacct there, the clock is the wall's). Named at random: no two sandboxes share one,
    whatever their pid namespaces. (No CPU quota: a program's processes share the CPUs with the other wardens' as one
    scheduler group, the warden's session, and a program cannot leave it: no new session. A quota of one core changed
    no verdict, the clock being CPU time, and cost 15-25% of the sandbox's throughput, measured.)"""

    def __init__(self, version: int, directories: list[str], cpu_usage: str | None):
        self.version, self.directories, self.cpu_usage = version, directories, cpu_usage

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> "Cgroup | None":
        """None where neither memory nor pids can be bounded (not root, or no writable hierarchy)."""
        name = f"codeplay-{os.urandom(8).hex()}"
        paths = {}
        with open("/proc/self/cgroup") as lines:
            for line in lines:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
        v2 = f"/sys/fs/cgroup{paths.get('', '/')}".rstrip("/")
        try:
            with open(f"{v2}/cgroup.subtree_control") as control:
                delegated = set(control.read().split())
        except OSError:
            delegated = set()
        if {"memory", "pids"} <= delegated:
            version, directories = 2, [f"{v2}/{name}"]
            limits = {"memory.max": memory_bytes, "pids.max": processes}
            usage = f"{v2}/{name}/cpu.stat"  # (counted in every cgroup v2, with or without the cpu controller)
        else:
            version = 1
            hierarchies = {"memory": None, "pids": None, "cpuacct": None}
            for controller in hierarchies:
                hierarchy = f"/sys/fs/cgroup/{controller}"
                if controller in paths and os.path.isdir(hierarchy):
                    hierarchies[controller] = os.path.realpath(hierarchy) + paths[controller].rstrip("/") + f"/{name}"
            directories = list(dict.fromkeys(d for d in hierarchies.values() if d is not None))
            limits = {"memory.limit_in_bytes": memory_bytes, "pids.max": processes}
            usage = f"{hierarchies['cpuacct']}/cpuacct.usage" if hierarchies["cpuacct"] else None
        made = []
        try:
            for directory in directories:
                os.mkdir(directory)
                made.append(directory)
            for file, value in limits.items():
                directory = next(d for d in directories if os.path.exists(f"{d}/{file}"))
                with open(f"{directory}/{file}", "w") as limit:
                    limit.write(str(value))
            return cls(version, directories, usage)
        except (OSError, StopIteration):
            for directory in reversed(made):
                os.rmdir(directory)
            return None

    def open_files(self) -> tuple[list[int], int, int | None]:
        """(fds to join each hierarchy, fd of the OOM-kill counter, fd of the CPU usage or None): opened before the
        chroot."""
        joins = [os.open(f"{directory}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for directory in self.directories]
        file = "memory.events" if self.version == 2 else "memory.oom_control"
        events = next(f"{d}/{file}" for d in self.directories if os.path.exists(f"{d}/{file}"))
        usage = (
            os.open(self.cpu_usage, os.O_RDONLY | os.O_CLOEXEC)
            if self.cpu_usage and os.path.exists(self.cpu_usage)
            else None
        )
        return joins, os.open(events, os.O_RDONLY | os.O_CLOEXEC), usage

    def remove(self) -> None:
        """Once the warden is gone: its processes leave the cgroup as the kernel reaps them."""
        deadline = time.monotonic() + 5.0
        for directory in self.directories:
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)


def oom_kills(fd: int) -> int:
    for line in os.pread(fd, 4096, 0).decode().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def cpu_seconds(fd: int) -> float:
    """CPU seconds the cgroup's processes used, from cgroup v1's cpuacct.usage (ns) or v2's cpu.stat (usage_usec)."""
    text = os.pread(fd, 4096, 0).decode()
    if text.startswith("usage_usec"):
        return int(text.split()[1]) / 1e6
    return int(text) / 1e9


def tasks_of(uid: int) -> int:
    """Threads that count against uid's RLIMIT_NPROC now, from the host's /proc."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


class Removal:
    """Deleting a tree a slice at a time (`step` goes on where the last one stopped), holding one
    directory open and walking by names relative to it: a program may leave a tree deeper than any
    stack or path. Directories are made writable first: without root, programs have the warden's
    uid and may have locked them."""

    DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW

    def __init__(self, top: str):
        self.top, self.fd, self.names = top, None, []  # the open directory, and its names below top

    def step(self, deadline: float) -> bool:
        """Delete until `deadline`; True once everything is gone (or could not be)."""
        try:
            if self.fd is None:
                os.chmod(self.top, 0o700)
                self.fd = os.open(self.top, self.DIRECTORY)
            while time.monotonic() < deadline:
                child = None
                with os.scandir(self.fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            child = entry.name
                        else:
                            os.unlink(entry.name, dir_fd=self.fd)
                if child is not None:  # down into one directory that is left
                    os.chmod(child, 0o700, dir_fd=self.fd)
                    self._move_to(os.open(child, self.DIRECTORY, dir_fd=self.fd))
                    self.names.append(child)
                elif self.names:  # empty: up, and remove it
                    self._move_to(os.open("..", self.DIRECTORY, dir_fd=self.fd))
                    os.rmdir(self.names.pop(), dir_fd=self.fd)
                else:
                    self._move_to(None)
                    os.rmdir(self.top)
                    return True
            return False
        except OSError:  # gone already, or not ours to delete: the launcher tries once more at the end
            self._move_to(None)
            return True

    def _move_to(self, fd: int | None) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = fd
