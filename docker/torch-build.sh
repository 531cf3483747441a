#!/usr/bin/env bash
# Which build of torch 2.13.0 docker/install.sh installs, printed as its name: TORCH=auto (the default) takes cuda,
# PyPI's own build for CUDA 13.0, where an NVIDIA driver is installed, and cpu elsewhere (a few hundred MB against
# several GB); TORCH=cpu, cuda or a CUDA build of PyTorch's own index (cu128, cu126, ...: for drivers older than R580)
# chooses. Anything else is refused in one line.
set -euo pipefail
TORCH=${TORCH:-auto}
if [ "$TORCH" = auto ]; then
    if [ -e /proc/driver/nvidia/version ] || command -v nvidia-smi > /dev/null; then TORCH=cuda; else TORCH=cpu; fi
fi
[[ "$TORCH" =~ ^(cpu|cuda|cu1[0-9]{2})$ ]] \
    || { echo "install: TORCH=$TORCH: choose auto, cpu, cuda (CUDA 13.0) or a CUDA 12 build such as cu128" >&2; exit 1; }
echo "$TORCH"
