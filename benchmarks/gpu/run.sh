#!/usr/bin/env bash
# The GPU check, in one command: `bash benchmarks/gpu/run.sh OUT_DIR` on a machine with a GPU, from the repository
# root. With PYTHON unset it runs the machine's python3 with the wheels of .gpu/ (prepare.sh fills it; carried to a
# machine that can download nothing) installed beside its own packages; `make gpu-check` sets PYTHON to our .venv's.
# It runs `pytest -m gpu` (what the CPU tests only predict, checked on CUDA), then the measurements at the paper's
# scale (`benchmarks/gpu/check.py`). Everything lands in OUT_DIR: machine.txt, pytest.log, pytest.xml, check.log,
# check.json. Extra arguments go to check.py (`--device cpu --tiny`: the CPU version). About 6 minutes on an H100.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benchmarks/gpu/run.sh OUT_DIR [check.py options]}
shift
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -z "${PYTHON:-}" ]; then
    [ -d .gpu/wheels ] || { echo "no .gpu/wheels: run benchmarks/gpu/prepare.sh first (or set PYTHON)"; exit 2; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/codeplay-site \
        .gpu/wheels/*.whl || exit 2
    export PYTHONPATH="/tmp/codeplay-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
PYTHON=${PYTHON:-python3}
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2> /dev/null
    echo "cores: $(nproc)  kernel: $(uname -r)  python: $($PYTHON -V 2>&1)"
    $PYTHON -c "import torch, transformers, lightning, hnswlib, omegaconf; print('torch', torch.__version__, \
'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'lightning', lightning.__version__)"
} 2>&1 | tee "$OUT/machine.txt"
# the GPU tests: each under a time limit, the whole run under another, so the measurements always get their turn
timeout 240 $PYTHON -m pytest -q -m gpu -p no:cacheprovider --timeout 120 --junitxml "$OUT/pytest.xml" \
    tests/gpu tests/unit/models/test_model_matrix_sampling.py tests/unit/models/test_model_matrix_scoring.py 2>&1 | tee "$OUT/pytest.log"
tests=${PIPESTATUS[0]}
timeout 330 $PYTHON -m benchmarks.gpu.check --out "$OUT" --budget-s 270 "$@" 2>&1 | tee "$OUT/check.log"
check=${PIPESTATUS[0]}
echo "pytest -m gpu: exit $tests; check: exit $check"
[ "$tests" = 0 ] && [ "$check" = 0 ]
