"""`codeplay bench` on small inputs: the sandbox benchmark's sandbox, naive harness and in-process ceiling must
reach identical verdicts, the archive benchmark's exact search and recall must be right, and the roofline must count
a decode step's FLOPs (the model benchmarks need the real model)."""

import numpy as np
import pytest
import torch

from benchmarks.archive import QUERY_CHUNK, bench_knn, exact_nearest, synthetic_embeddings
from benchmarks.sandbox import bench_sandbox, benchmark_programs


def test_the_sandbox_benchmark_agrees_with_the_naive_harness_and_in_process_judging():
    result = bench_sandbox(60)
    assert result["identical_verdicts"], result["mismatches"]
    assert result["programs"] == 60 and result["sandbox_verdicts_per_s"] > 0 and result["naive_verdicts_per_s"] > 0
    assert result["bare_forks_per_s"] > 0 and 0 < result["fraction_of_bare_forks"] < 1
    assert set(result["status_counts"]) >= {"pass", "fail", "error"}


def test_the_benchmark_mix_holds_every_kind_of_verdict():
    programs = benchmark_programs(300)
    assert len(programs) == 300 and len({program.f for program in programs}) == 300  # an f of its own each


def test_exact_search_is_the_k_smallest_of_every_cosine_distance():
    """Against one distance at a time, over more queries than one chunk of the matrix products."""
    rng = np.random.default_rng(0)
    stored, queries = synthetic_embeddings(rng, 40, 16), synthetic_embeddings(rng, QUERY_CHUNK + 3, 16)
    assert stored.dtype == np.float32 and np.allclose(np.linalg.norm(stored, axis=1), 1, atol=1e-6)
    slowest = [sorted(1 - float(np.dot(query, row)) for row in stored)[:5] for query in queries]
    np.testing.assert_allclose(exact_nearest(stored, queries, 5), slowest, atol=1e-5)


def test_the_knn_benchmark_on_a_small_archive_meets_its_recall_goal():
    """At 2,000 vectors the index's search is all but exact: recall@5 at the goal, the novelty reward unchanged."""
    result = bench_knn(archive_size=2000, dim=32, queries=300)
    assert result["recall_at_5"] >= 0.95 and result["novelty_reward_error"] < 1e-3
    assert result["exact_queries_per_s"] > 0 and result["hnsw_queries_per_s"] > 0


def test_the_roofline_counts_every_weight_matmul_of_a_decode_step(tiny_llama):
    """2 FLOPs per weight of every linear layer, the vocabulary projection among them, for one token."""
    from benchmarks.roofline import flops_per_token, roofline

    linear_weights = sum(m.weight.numel() for m in tiny_llama.modules() if isinstance(m, torch.nn.Linear))
    assert flops_per_token(tiny_llama.config) == 2 * linear_weights
    limit = roofline(tiny_llama.config, batch=4, dtype=torch.float32, repeats=2)
    assert limit["tokens_per_s"] > 0
    assert limit["gflops"] == pytest.approx(limit["tokens_per_s"] * flops_per_token(tiny_llama.config) / 1e9)
