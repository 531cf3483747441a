#!/usr/bin/env bash
# Fills .gpu/ (ignored by git; carried to the GPU machine, which reaches no network) with what its image lacks:
# wheels for its CPython 3.12 on x86-64 (our pinned transformers, omegaconf, chroma-hnswlib, gymnasium for `cwm
# synthesize`), SmolLM2's tokenizer and a small CWM data set. Run once, here, after `make install` (about a
# minute); then print what a run would carry against the 64 MiB limit.
set -euo pipefail
cd "$(dirname "$0")/../.."
GPU=.gpu
PLATFORM="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
mkdir -p "$GPU/wheels"
# shellcheck disable=SC2086 # PLATFORM is a list of options
python3 -m pip download -q --no-deps $PLATFORM -d "$GPU/wheels" \
    transformers==5.24.0 omegaconf==2.4.0 chroma-hnswlib==0.7.6 gymnasium==0.29.1 farama-notifications==0.0.4
.venv/bin/python -m benchmarks.gpu.prepare "$GPU"
tracked=$(git ls-files -z | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
untracked=$(git ls-files -z --others --exclude-standard | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
carried=$(du -sb "$GPU" | cut -f1)
echo "a run carries $(( (tracked + untracked + carried) / 1048576 )) MiB of 64: tracked $(( tracked / 1048576 )),"\
     "untracked $(( untracked / 1048576 )), $GPU $(( carried / 1048576 ))"
