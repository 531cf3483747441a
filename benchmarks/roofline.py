"""Sampling against the machine's limit, in one run: the matmul rate of this machine at the model's own decode
shapes (a batch of rows, one token each, through every linear layer and the vocabulary projection) gives the
tokens/s a decode step would reach at 100% of it; the Setter's streams (`sample_streams`) and the Solver's
`sample()` are measured as fractions of that, with the model's weights in each dtype.

The FLOPs counted are the linear layers' (2 x weights per token, ~0.27 GFLOP for SmolLM2-135M); attention over
the context is left out, so the fractions slightly flatter a long context.
"""

from __future__ import annotations

import functools
import time

STEPS = 48  # tokens per row in each Setter streams measurement


def decode_matmuls(config) -> list[tuple[int, int, int]]:
    """(times per token, in features, out features) of every weight matmul of a decoder-only model's step."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    per_layer = [
        (hidden, config.num_attention_heads * head_dim),
        (hidden, kv),
        (hidden, kv),
        (config.num_attention_heads * head_dim, hidden),
        (hidden, config.intermediate_size),
        (hidden, config.intermediate_size),
        (config.intermediate_size, hidden),
    ]
    return [(layers, k, n) for k, n in per_layer] + [(1, hidden, config.vocab_size)]


def flops_per_token(config) -> int:
    return sum(2 * times * k * n for times, k, n in decode_matmuls(config))


def roofline(config, batch: int, dtype, repeats: int = 20) -> dict:
    """The decode step's matmuls on random weights in `dtype`, each timed alone at `batch` rows, by `F.linear` and
    from weights prepacked for the CPU's library (as sampling runs them, `models/packed.py`), the faster of the two
    per shape: tokens/s at 100% of this machine's rate at these shapes, and that rate."""
    import torch
    import torch.nn.functional as F

    from codeplay_lightning.models.packed import packed_linears

    step_seconds = 0.0
    for times, k, n in decode_matmuls(config):
        rows, linear = torch.randn(batch, k, dtype=dtype), torch.nn.Linear(k, n, bias=False, dtype=dtype)
        plain = _seconds_per_call(functools.partial(F.linear, rows, linear.weight), repeats)
        with torch.no_grad(), packed_linears(linear):
            prepacked = _seconds_per_call(functools.partial(linear, rows), repeats)
        step_seconds += times * min(plain, prepacked)
    return {"tokens_per_s": batch / step_seconds, "gflops": flops_per_token(config) * batch / step_seconds / 1e9}


def _seconds_per_call(call, repeats: int) -> float:
    call()  # warm-up: the kernel's first call plans it
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - started) / repeats


def setter_streams_tokens_per_s(model, tokenizer, streams: int) -> float:
    """`sample_streams` on the Setter prompt of training (6 few-shot puzzles), `streams` rows, STEPS steps."""
    import torch

    from codeplay_lightning.models import SamplingConfig, sample_streams
    from codeplay_lightning.puzzles import SETTER_STOP, fewshot_puzzles
    from codeplay_lightning.setter.rollout import setter_sampling_prompt

    prompt = setter_sampling_prompt(tokenizer, fewshot_puzzles()[:6])

    def run(steps: int) -> int:
        generators = [torch.Generator().manual_seed(seed) for seed in range(streams)]
        config = SamplingConfig(steps, 0.8, 1.0, SETTER_STOP)
        return sum(len(ids) for ids in sample_streams(model, tokenizer, prompt, steps, config, generators).token_ids)

    run(2)  # warm-up
    started = time.perf_counter()
    tokens = run(STEPS)
    return tokens / (time.perf_counter() - started)


def solver_sample_tokens_per_s(model, tokenizer, batch: int, new_tokens: int) -> float:
    """`sample()` as the few-shot Solver calls it: `batch` rows of `new_tokens` tokens, the CPU scale's N_a attempts per
    bundled puzzle (a puzzle's identical prompts are prefilled once) behind its few-shot prompt; no stop strings, so
    that the batch stays full; prefill included."""
    import torch

    from benchmarks.models import solver_prompts
    from codeplay_lightning.config import TrainConfig
    from codeplay_lightning.models import SamplingConfig, sample

    config = TrainConfig()  # the CPU scale: the Solver is measured at its N_a and token budget
    prompts = solver_prompts(batch, fewshot=config.rollout.fewshot, attempts=config.solver.attempts)
    generators = [torch.Generator().manual_seed(row) for row in range(batch)]
    sample(model, tokenizer, prompts[:2], SamplingConfig(2), generators[:2])  # warm-up
    started = time.perf_counter()
    samples = sample(model, tokenizer, prompts, SamplingConfig(new_tokens, 0.8), generators)
    return sum(len(ids) for ids in samples.token_ids) / (time.perf_counter() - started)


def bench_roofline() -> dict:
    """Per dtype: the roofline at 32 and 64 rows, and the Setter's streams (32, 64) and the Solver's `sample()`
    (64 rows, of STEPS tokens and of the CPU scale's Solver budget) as tokens/s and as fractions of the roofline at
    their batch."""
    import torch

    from codeplay_lightning.allocator import keep_freed_memory
    from codeplay_lightning.config import TrainConfig
    from codeplay_lightning.models import EMBEDDED_ALIAS, load_causal_lm, native_bf16

    keep_freed_memory()  # as `codeplay train` samples: a decoding step's fresh logits would fault their pages in
    solver_budget = TrainConfig().solver.max_new_tokens
    result = {
        "model": EMBEDDED_ALIAS,
        "native_bf16": native_bf16("cpu"),
        "steps": STEPS,
        "solver_budget": solver_budget,
    }
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model, tokenizer = load_causal_lm(EMBEDDED_ALIAS, dtype=dtype)
        limits = {batch: roofline(model.config, batch, dtype) for batch in (32, 64)}
        workloads = {  # key: (rows, measurement, its arguments after model and tokenizer)
            "setter_streams_32": (32, setter_streams_tokens_per_s, ()),
            "setter_streams_64": (64, setter_streams_tokens_per_s, ()),
            "solver_sample_64": (64, solver_sample_tokens_per_s, (STEPS,)),
            "solver_sample_64_budget": (64, solver_sample_tokens_per_s, (solver_budget,)),
        }
        numbers = {
            "gflop_per_token": flops_per_token(model.config) / 1e9,
            **{f"roofline_{batch}_tokens_per_s": limit["tokens_per_s"] for batch, limit in limits.items()},
            **{f"matmul_{batch}_gflops": limit["gflops"] for batch, limit in limits.items()},
        }
        for key, (batch, measure, arguments) in workloads.items():
            # this machine's rate drifts by a third within minutes (a shared host): the roofline is taken
            # just before and just after each measurement, and the measurement is a fraction of their mean
            before = roofline(model.config, batch, dtype)["tokens_per_s"]
            speed = measure(model, tokenizer, batch, *arguments)
            limit = (before + roofline(model.config, batch, dtype)["tokens_per_s"]) / 2
            numbers |= {f"{key}_tokens_per_s": speed, f"{key}_roofline": limit, f"{key}_of_roofline": speed / limit}
        result[name] = numbers
    return result
