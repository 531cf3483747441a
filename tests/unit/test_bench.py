"""The benchmarks (`make bench`) on small inputs: the sandbox benchmark's sandbox, naive harness and in-process
ceiling must reach identical verdicts, the archive benchmark's exact search and recall must be right, and the
roofline must count a decode step's FLOPs (the model benchmarks need the real model)."""

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


def test_the_iteration_flops_count_each_token_once_where_the_loop_needs_it(tmp_path, tiny_llama, char_tokenizer):
    """Against a count by hand: the Setter's prompt and every stream step; the Solver's few-shot block once, each
    valid puzzle's own prompt and the completions; scoring and 3x per PPO epoch the actions and one prompt per
    minibatch. An invalid puzzle costs the Solver nothing."""
    import json

    from benchmarks.loop import iteration_flops
    from benchmarks.roofline import flops_per_token
    from codeplay_lightning.config import load_config
    from codeplay_lightning.puzzles import fewshot_puzzles, solver_prompt
    from codeplay_lightning.puzzles.parsing import check_puzzle
    from codeplay_lightning.setter.rollout import setter_sampling_prompt
    from tests.support import CONFIGS

    config_path = CONFIGS / "balanced.yaml"
    config = load_config([config_path])
    texts = ["def f(x: int):\n    return x > 3", "def f(s: str):\n    return s == 'ab'", "def f(x:"]
    (tmp_path / "puzzles.jsonl").write_text(
        "".join(json.dumps({"puzzle": text, "valid": check_puzzle(text).valid}) + "\n" for text in texts)
    )
    record = {"action_tokens": 500, "solver_completion_tokens": 300}
    gflop = iteration_flops(record, config, tmp_path, tiny_llama.config, char_tokenizer)

    examples = fewshot_puzzles()[: config.rollout.fewshot]
    prompts = [solver_prompt(examples, check_puzzle(text).puzzle) for text in texts[:2]]
    shared = next(i for i, (a, b) in enumerate(zip(prompts[0], prompts[1])) if a != b)  # one token per character
    setter_prompt = len(setter_sampling_prompt(char_tokenizer, examples))
    scored = config.ppo.n_minibatches * setter_prompt + 500
    expected_tokens = {
        "setter_sampling": setter_prompt + config.rollout.n_envs * config.rollout.n_steps,
        "solver": shared + sum(len(prompt) - shared for prompt in prompts) + 300,
        "old_logprobs_and_values": scored,
        "ppo_update": 3 * config.ppo.ppo_epochs * scored,
    }
    per_token = flops_per_token(tiny_llama.config) / 1e9
    assert gflop == pytest.approx({phase: count * per_token for phase, count in expected_tokens.items()})


def test_the_selfplay_costs_count_the_rejudge_and_bc_against_the_rest_by_hand():
    from benchmarks.selfplay import selfplay_costs

    records = [  # two iterations; the second ends with the BC phase (30 s) and its evaluations (20 s)
        {"seconds": 100.0, "initial_solver_seconds": 10.0},
        {"seconds": 150.0, "initial_solver_seconds": 12.0, "solver_learning_seconds": 50.0},
    ]
    costs = selfplay_costs(records, {"bc": {"seconds": 30.0, "steps": 3}})
    rest = 250 - 22 - 50  # without the re-judges, the phase and the evaluations
    assert (costs["iterations"], costs["rest_seconds"], costs["rejudge_seconds"]) == (2, rest, 22)
    assert costs["added_over_rest"] == pytest.approx((22 + 30) / rest)


def test_make_bench_runs_the_benchmarks_with_its_options(monkeypatch, tmp_path):
    import benchmarks
    from benchmarks.__main__ import main

    calls = []
    monkeypatch.setattr(benchmarks.__main__, "run_benchmarks", lambda out, **options: calls.append((out, options)))
    main(["--out", str(tmp_path / "bench.json"), "--pairs", "5", "--skip-model"])
    assert calls == [(tmp_path / "bench.json", {"pairs": 5, "with_model": False})]
