"""What a collective raises when a rank is gone is told apart from the run's own errors (`peer_lost`), and the
one-process path of the ranks' collective hands back this rank's own objects."""

import numpy as np
import pytest
import torch.distributed as dist

from codeplay_lightning.setter.ranks import from_every_rank, gather_puzzles, peer_lost


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:41233"),
        RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer"),
        RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms"),
        RuntimeError("NCCL communicator was aborted on rank 1."),
        dist.DistNetworkError("failed to recv, got 0 bytes"),
        dist.DistStoreError("wait_for_workers: the store did not answer"),
    ],
)
def test_a_lost_peer_is_recognised(error):
    assert peer_lost(error)


@pytest.mark.parametrize(
    "error",
    [ValueError("reward.w_difficulty must be a number"), RuntimeError("CUDA out of memory"), KeyError("state_dict")],
)
def test_the_runs_own_errors_are_not_a_lost_peer(error):
    assert not peer_lost(error)


def test_one_process_gathers_its_own_objects_and_puzzles():
    assert not dist.is_initialized()
    assert from_every_rank({"rank": 0}) == [{"rank": 0}]
    embeddings = np.arange(6, dtype=np.float32).reshape(2, 3)
    texts, gathered, start = gather_puzzles(["def f(x): return x", "def f(x): return not x"], embeddings)
    assert texts == ["def f(x): return x", "def f(x): return not x"]
    np.testing.assert_array_equal(gathered, embeddings)
    assert start == 0
