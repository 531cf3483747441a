"""`codeplay env`: what this machine runs, to paste into a bug report: versions, devices and the precision `auto`
picks there, the allocator and the sandbox's isolation."""

from __future__ import annotations

import argparse
import ctypes.util
import os
import platform
import sys

HELP = "report versions, devices, bf16 support, the allocator and the sandbox's isolation (for bug reports)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    for name, value in report():
        print(f"- {name}: {value}")
    return 0


def report() -> list[tuple[str, str]]:
    import torch

    from codeplay_lightning.config import TrainerConfig
    from codeplay_lightning.devices import cpu_model, native_bf16, package_versions, resolved_precision

    rows = list(package_versions().items())
    rows.append(("python", f"{platform.python_version()} ({sys.executable})"))
    rows.append(("platform", platform.platform()))
    rows.append(("user", "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root)"))
    rows.append(("torch build", f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"))
    rows.append(("cpu", f"{cpu_model()}, {os.cpu_count()} cores, native bf16: {_yes(native_bf16('cpu'))}"))
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            memory = torch.cuda.get_device_properties(index).total_memory / 2**30
            rows.append(
                (
                    f"cuda:{index}",
                    f"{torch.cuda.get_device_name(index)}, {memory:.0f} GiB, compute capability {major}.{minor}, "
                    f"native bf16: {_yes(native_bf16(f'cuda:{index}'))}",
                )
            )
    else:
        rows.append(("cuda", "no device"))
    rows.append(("trainer.precision=auto", resolved_precision(TrainerConfig())))
    rows.append(("allocator", "jemalloc" if ctypes.util.find_library("jemalloc") else "glibc (libjemalloc2 missing)"))
    rows.append(("sandbox", _isolation()))
    return rows


def _yes(flag: bool) -> str:
    return "yes" if flag else "no (emulated: auto picks float32)"


def _isolation() -> str:
    from codeplay_lightning.execution import Sandbox

    with Sandbox(workers=1) as sandbox:
        return f"{sandbox.level} isolation: {sandbox.isolation}"
