"""The world a warden builds for its programs: mounts and the read-only root, cgroups, and the deletion of what
programs leave without root."""

import ctypes
import os
import sys
import time

TMP_SIZE = "64m"  # each program process's fresh /tmp
_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 36, 38


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def _bind_read_only(source: str, target: str) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _mount_tmp(target: str) -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMP_SIZE},mode=1777")


def build_root(stdlib: str, module_dirs: list[str]) -> str:
    """A read-only root that holds only the system's libraries and programs and Python's stdlib,
    each at its own path, with every site-packages and dist-packages directory in it emptied
    (`module_dirs`, the packages offered to programs, are mounted back at their own paths): no
    home directories, no /run or /var (no unix sockets to reach), an empty /etc, a /dev with null,
    zero, random and urandom, /proc of this pid namespace and a small /tmp."""
    system = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", stdlib]
    links = {path: os.readlink(path) for path in system if os.path.islink(path)}
    # held open before the host's /tmp is hidden: the interpreter or a package may live under it
    held = {
        path: os.open(path, os.O_PATH | os.O_DIRECTORY)
        for path in [*system, *module_dirs]
        if path not in links and os.path.isdir(path)
    }
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")  # host /tmp hidden too
    root = "/tmp/root"
    os.mkdir(root)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in system:
        inside = root + path
        if path in links:
            os.symlink(links[path], inside)
        elif path in held and not os.path.exists(inside):
            os.makedirs(inside, 0o755)
            _bind_read_only(f"/proc/self/fd/{held[path]}", inside)
    masks = [path for path in _package_dirs(root) if os.path.isdir(path)]
    for mask in masks:
        _mount("tmpfs", mask, "tmpfs", MS_NOSUID | MS_NODEV, "size=16k,mode=755")
    for path in module_dirs:
        os.makedirs(root + path, 0o755, exist_ok=True)
        _bind_read_only(f"/proc/self/fd/{held[path]}", root + path)
    for fd in held.values():
        os.close(fd)
    for mask in masks:
        _mount(None, mask, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for path in ("/tmp", "/etc", "/proc", "/dev"):
        os.makedirs(root + path, 0o755, exist_ok=True)
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16k,mode=755")
    for device in ("null", "zero", "urandom", "random"):
        open(f"{root}/dev/{device}", "w").close()
        _bind_read_only(f"/dev/{device}", f"{root}/dev/{device}")
        _mount(None, f"{root}/dev/{device}", None, MS_REMOUNT | MS_BIND | MS_NOSUID)  # writable, devices allowed
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount_tmp(root + "/tmp")
    _mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return root


def _package_dirs(root: str) -> list[str]:
    """Where installed packages live inside `root`: the interpreter's own site-packages and the
    system's python site- and dist-packages directories."""
    import glob
    import sysconfig

    own = {
        sysconfig.get_path(key, vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
        for key in ("purelib", "platlib")
    }
    patterns = ["/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages", "/usr/lib/python3/dist-packages"]
    return sorted({root + path for path in own} | {path for pattern in patterns for path in glob.glob(root + pattern)})


class Cgroup:
    """The cgroup(s) of one warden's zygote and so of every process it forks: memory and process
    count bounded per program (one program's processes run under a warden at a time). cgroup v2
    when the warden's parent cgroup delegates both controllers, else cgroup v1's memory and pids
    hierarchies. Named at random: no two sandboxes share one, whatever their pid namespaces."""

    def __init__(self, version: int, directories: list[str]):
        self.version, self.directories = version, directories

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> "Cgroup | None":
        """None where neither is available (not root, or no writable hierarchy)."""
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
                delegated = {"memory", "pids"} <= set(control.read().split())
        except OSError:
            delegated = False
        if delegated:
            version, directories = 2, [f"{v2}/{name}"]
            limits = {"memory.max": memory_bytes, "pids.max": processes}
        else:
            version = 1
            directories = [
                f"/sys/fs/cgroup/{controller}{paths.get(controller, '/')}".rstrip("/") + f"/{name}"
                for controller in ("memory", "pids")
            ]
            limits = {"memory.limit_in_bytes": memory_bytes, "pids.max": processes}
        made = []
        try:
            for directory in directories:
                os.mkdir(directory)
                made.append(directory)
            for file, value in limits.items():
                directory = next(d for d in directories if os.path.exists(f"{d}/{file}"))
                with open(f"{directory}/{file}", "w") as limit:
                    limit.write(str(value))
            return cls(version, directories)
        except (OSError, StopIteration):
            for directory in made:
                os.rmdir(directory)
            return None

    def open_files(self) -> tuple[list[int], int]:
        """(fds to join each hierarchy, fd of the OOM-kill counter): opened before the chroot."""
        joins = [os.open(f"{directory}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for directory in self.directories]
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        return joins, os.open(f"{self.directories[0]}/{events}", os.O_RDONLY | os.O_CLOEXEC)

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


def _tasks_of(uid: int) -> int:
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
