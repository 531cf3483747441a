"""The unit suite runs torch on one thread."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Every model here is tiny: a second thread's OpenMP barriers cost more than its work, up to 100 times more
    while other processes keep the cores busy (7.8 s against 0.06 s for a test measured so; test_sampling.py took
    122 s of a loaded run's 368 s with the default threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
