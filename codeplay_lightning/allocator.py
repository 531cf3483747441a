"""`keep_freed_memory()`: glibc's malloc keeps the memory PyTorch frees, to hand it out again; and the peak
resident memory of a stretch of work (`reset_peak_rss`, `peak_rss_gib`).

On CPU every PPO step allocates and frees tensors of hundreds of MB (activations and their gradients; when
this was measured, also the vocabulary-wide logits, which scoring now projects in chunks). By default glibc
serves each one above its mmap threshold (at most 32 MB) with a fresh mmap and unmaps it on free, so the next
step faults every page in and zeroes it again. Served from the heap and never trimmed, they reuse pages
already mapped: one iteration's PPO update at `configs/base.yaml`'s scale took 83.0 s against 101.2 s (its ten
forward + backward passes 80.0 s against 98.6 s; the whole iteration 164 s against 178 s). The price is that
the process keeps its peak memory until it exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource
from pathlib import Path

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters, from glibc's malloc.h
HEAP_UP_TO = 1 << 30  # bytes: allocations up to this size come from the heap, not from mmap
NEVER_TRIM = 2**31 - 1  # bytes of free heap top kept before glibc returns any (mallopt takes an int)

log = logging.getLogger("codeplay_lightning")


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
    """`keep_freed_memory()` when Lightning's `accelerator` trains on the CPU: `cpu`, or `auto` without CUDA.
    On a GPU the large tensors are on the device: keeping freed host memory buys nothing there, and each
    process would hold its peak host memory until it exits. Returns whether freed memory is kept."""
    import torch

    if accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available()):
        return keep_freed_memory()
    return False


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
