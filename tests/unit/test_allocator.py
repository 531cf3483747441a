"""Training commands relaunch under jemalloc where it is installed; elsewhere `keep_freed_memory` makes glibc keep a
freed large block in the heap, where it is reused; only training on the CPU asks for either."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeplay_lightning import allocator

# In a fresh interpreter: free 200 MB, then report how much free memory the heap holds (mallinfo2's fordblks).
FREE_A_LARGE_BLOCK = """
import ctypes, json, sys
from codeplay_lightning.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
block = bytearray(200 << 20)
del block

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
print(json.dumps({"kept": kept, "free_in_heap": libc.mallinfo2().fordblks}))
"""


def free_a_large_block(mode: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", FREE_A_LARGE_BLOCK, mode], capture_output=True, text=True, check=True
    )
    return json.loads(completed.stdout)


def glibc_with_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not glibc_with_mallinfo2(), reason="needs glibc >= 2.33 (mallinfo2)")
def test_a_freed_large_block_stays_in_the_heap_only_when_asked():
    default, kept = free_a_large_block("default"), free_a_large_block("keep")
    assert kept["kept"] is True
    assert kept["free_in_heap"] >= 200 << 20  # served from the heap and not trimmed: ready for the next one
    assert default["free_in_heap"] < 100 << 20  # an mmap of its own, unmapped on free


def test_without_glibc_it_warns_and_changes_nothing(monkeypatch, caplog):
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda name: None)
    assert allocator.keep_freed_memory() is False
    assert "not glibc" in caplog.text


@pytest.mark.parametrize(
    "argv, cuda, kept",
    [
        (["verify", "no-such-file.jsonl"], False, False),  # a command that trains nothing
        (["train", "configs/smoke.yaml", "trainer.accelerator=cpu"], True, True),
        (["train", "configs/smoke.yaml", "trainer.accelerator=gpu"], False, False),
        (["train", "configs/smoke.yaml", "trainer.accelerator=auto"], False, True),
        (["train", "configs/smoke.yaml", "trainer.accelerator=auto"], True, False),
    ],
)
def test_only_training_on_the_cpu_keeps_freed_memory(monkeypatch, caplog, argv, cuda, kept):
    """On a GPU the tensors are on the device: kept host memory would only hold each rank's peak until exit."""
    import torch

    from codeplay_lightning import cli, train

    monkeypatch.chdir(Path(__file__).parents[2])
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda name: None)  # a call shows as a warning
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(train, "train", lambda config, resume: Path("runs/nothing"))
    cli.main(argv)
    assert ("not glibc" in caplog.text) == kept


def test_under_jemalloc_glibc_is_left_alone(monkeypatch, caplog):
    monkeypatch.setattr(allocator, "jemalloc_loaded", lambda: True)
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: pytest.fail("glibc's settings asked for"))
    caplog.set_level("INFO", logger="codeplay_lightning")
    assert allocator.keep_freed_memory_on_cpu("cpu") is False
    assert "allocator: jemalloc" in caplog.text


# A command line as `codeplay train` runs it: the relaunch (an exec) happens first, then the command's own code.
RELAUNCHING_COMMAND = """
import json, os, sys
from codeplay_lightning import allocator
if sys.argv[1] == "missing":
    allocator.ctypes.util.find_library = lambda name: None
allocator.relaunch_under_jemalloc()
print(json.dumps({"argv": sys.argv[1:], "jemalloc": allocator.jemalloc_loaded(), "pid": os.getpid(),
                  "preload": os.environ.get("LD_PRELOAD", "")}))
"""


def run_relaunching(*argv: str, env: dict | None = None) -> dict:
    command = [sys.executable, "-c", RELAUNCHING_COMMAND, *argv]
    completed = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(completed.stdout)


def jemalloc_installed() -> bool:
    return sys.platform.startswith("linux") and ctypes.util.find_library("jemalloc") is not None


@pytest.mark.skipif(not jemalloc_installed(), reason="needs jemalloc (Debian: libjemalloc2; make install as root)")
def test_a_training_command_relaunches_itself_under_jemalloc_once():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.RELAUNCHED)}
    env["LD_PRELOAD"] = ""
    relaunched = run_relaunching("installed", "key=value", env=env)
    assert relaunched["jemalloc"] and "libjemalloc" in relaunched["preload"]
    assert relaunched["argv"] == ["installed", "key=value"]  # the same command line
    assert run_relaunching("missing", env=env)["jemalloc"] is False  # not installed: glibc, no relaunch
    # a relaunched process whose preload failed does not relaunch again
    failed = env | {allocator.RELAUNCHED: "1"}
    assert run_relaunching("installed", env=failed)["jemalloc"] is False


PEAK_OF_A_STRETCH = """
import json
from codeplay_lightning.allocator import peak_rss_gib, reset_peak_rss
block = bytearray(300 << 20)
block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page: resident
del block  # a block this large is unmapped at once
with_block = peak_rss_gib()
reset = reset_peak_rss()
print(json.dumps({"with_block": with_block, "reset": reset, "after_reset": peak_rss_gib()}))
"""


def test_the_peak_of_a_stretch_of_work_forgets_earlier_peaks():
    completed = subprocess.run([sys.executable, "-c", PEAK_OF_A_STRETCH], capture_output=True, text=True, check=True)
    peaks = json.loads(completed.stdout)
    assert peaks["reset"]  # Linux
    assert peaks["with_block"] >= 300 / 1024
    assert peaks["after_reset"] < peaks["with_block"] - 250 / 1024
