"""`codeplay env`: what this machine runs, to paste into a bug report: versions, devices and the precision `auto`
picks there, the allocator and the sandbox's isolation."""

from __future__ import annotations

import argparse
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
    from codeplay_lightning.devices import host_record, native_bf16, resolved_precision

    host = host_record()  # what a run's records say of the machine, and more
    rows = list(host["packages"].items())
    rows.append(("python", f"{host['python']} ({sys.executable})"))
    rows.append(("commit", host["commit"] or "not a git checkout"))
    rows.append(("platform", platform.platform()))
    rows.append(("user", "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root)"))
    rows.append(("torch build", host["torch_build"]))
    rows.append(("cpu", f"{host['cpu']}, {host['cores']} cores, native bf16: {_yes(host['native_bf16'])}"))
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
    rows.append(("allocator", "jemalloc" if host["allocator"] == "jemalloc" else "glibc (libjemalloc2 missing)"))
    rows.append(("sandbox", _isolation()))
    return rows


def _yes(flag: bool) -> str:
    return "yes" if flag else "no (emulated: auto picks float32)"


def _isolation() -> str:
    from codeplay_lightning.execution import Sandbox

    with Sandbox(workers=1) as sandbox:
        return f"{sandbox.level} isolation: {sandbox.isolation}"
