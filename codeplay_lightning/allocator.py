"""The CPU allocator of training, and the peak resident memory of a stretch of work (`reset_peak_rss`,
`peak_rss_gib`).

On CPU every PPO step allocates and frees tensors of hundreds of MB (activations and their gradients), and
sampling allocates caches and packed weights of other sizes at every call. Two ways to serve them:

- **jemalloc**, preloaded: `codeplay train`, `sft` and `sweep` run themselves again under it where it is
  installed (Debian: `libjemalloc2`; `make install` installs it as root). It reuses freed blocks by size class
  and returns pages unused for seconds, so resident memory follows what is alive. At the CPU scale's
  scale two `balanced` iterations peaked at 5.9 and 6.3 GiB under it, 6.8 and 7.7 under glibc's defaults, and
  7.4 and 8.7 with glibc keeping freed memory, which grows to 11-12 GiB by the fifth iteration; the PPO update
  took 13% longer than with kept memory (docs/results/speed.md).
- **glibc, freed memory kept** (`keep_freed_memory`), where jemalloc is missing. By default glibc serves each
  block above its mmap threshold (at most 32 MB) with a fresh mmap and unmaps it on free, so the next step
  faults every page in and zeroes it again: an iteration's PPO update took 83.0 s against 101.2 s with the
  blocks served from the heap and never trimmed. The heap then fragments: its peak grows over iterations.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import resource
import sys
from pathlib import Path

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters, from glibc's malloc.h
HEAP_UP_TO = 1 << 30  # bytes: allocations up to this size come from the heap, not from mmap
NEVER_TRIM = 2**31 - 1  # bytes of free heap top kept before glibc returns any (mallopt takes an int)

RELAUNCHED = "CODEPLAY_RELAUNCHED"  # set in the relaunched process: one relaunch at most, even if the preload fails

log = logging.getLogger("codeplay_lightning")


def relaunch_under_jemalloc() -> None:
    """Run this process's command again (exec) with jemalloc preloaded, where it is installed and not loaded yet.
    A preload cannot happen later: memory glibc handed out must be freed by glibc. Returns when it does not
    relaunch (another OS, jemalloc missing or already loaded, or this is the relaunched process)."""
    if not sys.platform.startswith("linux") or os.environ.get(RELAUNCHED) or jemalloc_loaded():
        return
    library = ctypes.util.find_library("jemalloc")  # its soname, which the dynamic loader finds as DT_NEEDED would
    if library is None:
        return
    preload = " ".join(filter(None, (os.environ.get("LD_PRELOAD"), library)))
    os.execve(
        sys.executable, [sys.executable, *sys.orig_argv[1:]], os.environ | {"LD_PRELOAD": preload, RELAUNCHED: "1"}
    )


def jemalloc_loaded() -> bool:
    """Whether this process allocates through jemalloc (preloaded or linked)."""
    try:
        return "libjemalloc" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def keep_freed_memory() -> bool:
    """Set glibc's malloc to keep freed memory in the process. Elsewhere, or if glibc refuses, the
    allocator stays as it is: a warning says so (PPO steps are then slower on CPU) and this returns False."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        reason = "the C library is not glibc"
    elif not (libc.mallopt(M_MMAP_THRESHOLD, HEAP_UP_TO) and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)):
        reason = "glibc refused to keep freed memory"
    else:
        return True
    log.warning("%s: freed tensors go back to the system (PPO steps slower on CPU)", reason)
    return False


def keep_freed_memory_on_cpu(accelerator: str) -> bool:
    """`keep_freed_memory()` when Lightning's `accelerator` trains on the CPU (`cpu`, or `auto` without CUDA) and
    the allocator is glibc's; under jemalloc it says so and changes nothing. On a GPU the large tensors are on the
    device: keeping freed host memory buys nothing there, and each process would hold its peak host memory until it
    exits. Returns whether freed memory is kept."""
    import torch

    if not (accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())):
        return False
    if jemalloc_loaded():
        log.info("allocator: jemalloc")
        return False
    kept = keep_freed_memory()
    if kept:
        log.warning("allocator: glibc keeping freed memory (jemalloc not loaded: peak memory grows over iterations)")
    return kept


def reset_peak_rss() -> bool:
    """Start a new peak of resident memory: Linux resets the process's high-water mark when "5" is written to
    /proc/self/clear_refs. Returns False where it cannot; `peak_rss_gib` then reports the peak since start."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_gib() -> float:
    """The process's peak resident memory since `reset_peak_rss` (or since it started), in GiB."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux; no /proc: since start
    (line,) = [line for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(line.split()[1]) / 2**20  # kB
