"""Files: a program cannot touch the caller's files or the host's, and its working directory is its own,
writable and fresh."""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
import uuid
from pathlib import Path

from sandbox_support import (
    ORDINARY_PROGRAMS,
    REPO,
    assert_nothing_outlives,
    check_ordinary,
    contained,
    program,
)

from codeplay_lightning.execution import Sandbox

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
    return {
        path.name: (path.read_bytes(), path.stat().st_mode, path.stat().st_mtime_ns)
        for path in sorted(directory.iterdir())
    }


def attack_files(mixed: Sandbox, directory: Path) -> None:
    victim = directory / "victim.txt"
    victim.write_text("precious\n")
    before = snapshot(directory)
    g = textwrap.dedent(ATTACKS).replace("VICTIM", repr(str(victim)))
    (verdict,) = contained(mixed, program("def f(done: List[str]) -> bool:\n    return done == []", g))
    assert verdict.status == "pass", verdict  # every attack failed
    assert snapshot(directory) == before
    assert victim.read_text() == "precious\n"


def test_files_in_callers_tmp_path_are_untouched(mixed, tmp_path):
    tmp_path.chmod(0o777)  # even world-writable
    attack_files(mixed, tmp_path)


def test_files_in_root_owned_dirs_are_untouched(mixed):
    build = REPO / "build"  # git-ignored; visible inside the sandbox, unlike /var/tmp
    created = not build.exists()
    build.mkdir(exist_ok=True)
    try:
        for parent in (Path("/var/tmp"), build):
            directory = Path(tempfile.mkdtemp(prefix="sandbox-victim-", dir=parent))
            directory.chmod(0o755)  # readable by the sandbox's uid, not writable
            try:
                attack_files(mixed, directory)
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
    targets = [
        path
        for path in ("/run/lock", "/var/lock", "/dev/shm", "/tmp", "/var/tmp")
        if os.path.isdir(path) and os.stat(path).st_mode & 0o002
    ]
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
    (verdict,) = contained(
        namespaced,
        program(
            "def f(done: List[str]):\n    return done == []",
            """
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
        """,
        ),
    )
    assert verdict.status == "pass", verdict
    if before is not None:
        assert Path("/etc/hostname").read_bytes() == before


def test_working_directory_is_writable_and_fresh(solo):
    writer = program(
        "def f(x: str):\n    return x == 'hello'",
        """
        import os
        def g():
            os.makedirs("sub/dir")
            with open("sub/dir/note.txt", "w") as note:
                note.write("hello")
            with open("top.txt", "w") as note:
                note.write("x")
            with open(os.path.join(os.getcwd(), "sub/dir/note.txt")) as note:
                return note.read()
        """,
    )
    sealed = program(
        "def f(x: str):\n    return x == 'sealed'",
        """
        import os
        def g():
            os.makedirs("locked/inner")
            open("locked/inner/file", "w").close()
            os.chmod("locked/inner", 0)
            os.chmod("locked", 0)
            return "sealed"
        """,
    )
    fresh = program("def f(x: List[str]):\n    return x == []", "import os\ndef g():\n    return os.listdir('.')")
    verdicts = solo.verify([writer, fresh, sealed, fresh, writer, fresh])
    assert [v.status for v in verdicts] == ["pass"] * 6, verdicts
    check_ordinary(solo.verify(ORDINARY_PROGRAMS))
    assert_nothing_outlives()
