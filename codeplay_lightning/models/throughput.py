"""Sampling throughput of `sample`: generated tokens per wall-clock second, prefill included."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from codeplay_lightning.models.sampling import SamplingConfig, sample


def measure_sampling_throughput(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    batch_size: int,
    max_new_tokens: int,
) -> float:
    """Tokens per second generated while sampling one continuation per prompt, `batch_size` at a time.

    Sampling is at temperature 1 with no stop strings, so rows run to `max_new_tokens` unless they
    sample eos; only tokens actually generated count. One untimed 2-token batch warms up first.
    For bf16, call this inside `torch.autocast(device_type, dtype=torch.bfloat16)`.
    """
    if not prompts:
        raise ValueError("measure_sampling_throughput needs at least one prompt")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    generators = [torch.Generator().manual_seed(index) for index in range(len(prompts))]
    sample(model, tokenizer, prompts[:batch_size], SamplingConfig(max_new_tokens=2), generators[:batch_size])

    config = SamplingConfig(max_new_tokens=max_new_tokens)
    generated = 0
    start = time.perf_counter()
    for first in range(0, len(prompts), batch_size):
        batch = slice(first, first + batch_size)
        samples = sample(model, tokenizer, prompts[batch], config, generators[batch])
        generated += sum(len(token_ids) for token_ids in samples.token_ids)
    return generated / (time.perf_counter() - start)
