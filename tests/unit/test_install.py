"""docker/install.sh, the install steps of both `make install` and the Docker image: what a host lacks is refused
in one line before pip installs anything. Offline: pip reads no index and no configuration."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "install.sh"


def run_install(venv_dir: Path, path: str, python: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env.update(PATH=path, PYTHON=python, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    return subprocess.run(
        [shutil.which("bash"), str(SCRIPT), str(venv_dir), "."],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_makefile_and_the_dockerfile_run_the_same_script():
    makefile = (ROOT / "Makefile").read_text()
    rule = makefile[makefile.index("$(BIN)/codeplay:") :].split("\n\n")[0]
    assert "TORCH=$(TORCH) bash docker/install.sh $(VENV)" in rule
    assert "RUN TORCH=$TORCH bash docker/install.sh /opt/venv ." in (ROOT / "docker" / "Dockerfile").read_text()


def test_a_missing_python_is_refused_in_one_line(tmp_path):
    result = run_install(tmp_path / "venv", os.environ["PATH"], str(tmp_path / "python3"))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"install: needs Python 3.11 or newer: {tmp_path / 'python3'} not found (PYTHON=python3.12 picks another)"
    ]
    assert not (tmp_path / "venv").exists()


def test_no_wheel_and_no_compiler_is_refused_in_one_line_naming_it(tmp_path):
    # a PATH without g++ or apt-get, as a user's host without a compiler; no index, so no wheel is found
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("id", "uname", "grep"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    venv_dir = tmp_path / "venv"
    venv.create(venv_dir, with_pip=True)
    python = str(venv_dir / "bin" / "python")
    result = run_install(venv_dir, str(bin_dir), python)
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert line.startswith("install: no wheel of chroma-hnswlib") and f"for Python {version} on " in line
    assert "building it needs g++" in line and "apt-get install g++" in line
    installed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    assert not any(name in installed.stdout for name in ("torch", "hnswlib", "codeplay"))  # pip installed nothing


def torch_build(tmp_path, path: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("bash"), str(ROOT / "docker" / "torch-build.sh")],
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_torch_is_the_cpu_build_where_no_nvidia_driver_is_installed_unless_chosen(tmp_path):
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this host has an NVIDIA driver")
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "nvidia-smi").write_text("#!/bin/sh\n")
    (driver / "nvidia-smi").chmod(0o755)
    plain = os.environ["PATH"]
    assert torch_build(tmp_path, plain).stdout == "cpu\n"
    assert torch_build(tmp_path, f"{driver}:{plain}").stdout == "cuda\n"
    assert torch_build(tmp_path, plain, TORCH="cu128").stdout == "cu128\n"
    assert torch_build(tmp_path, f"{driver}:{plain}", TORCH="cpu").stdout == "cpu\n"
    refused = torch_build(tmp_path, plain, TORCH="rocm")
    assert refused.returncode == 1 and refused.stderr.splitlines() == [
        "install: TORCH=rocm: choose auto, cpu, cuda (CUDA 13.0) or a CUDA 12 build such as cu128"
    ]
