"""The models' side: Solver sampling batched against one at a time, the LLM backends, and the Setter's
sampler against Hugging Face `generate`."""

from __future__ import annotations

import time


def solver_prompts(count: int, fewshot: int | None = None, attempts: int = 1) -> list[str]:
    """The Solver's own workload: few-shot prompts (the first `fewshot` bundled examples; all without it) for
    bundled puzzles, `attempts` rows each in a row, cycled to `count` rows."""
    from codeplay_lightning.puzzles import bundled_puzzles, fewshot_puzzles, solver_prompt

    examples = fewshot_puzzles()[:fewshot]
    puzzles = bundled_puzzles()
    return [solver_prompt(examples, puzzles[index // attempts % len(puzzles)]) for index in range(count)]


def bench_sampling(max_new_tokens: int = 48) -> dict:
    """The Solver's own workload: few-shot prompts for bundled puzzles, fp32 and bf16 weights."""
    import torch

    from codeplay_lightning.models import EMBEDDED_ALIAS, load_causal_lm

    prompts = solver_prompts(32)
    result = {"model": EMBEDDED_ALIAS, "max_new_tokens": max_new_tokens, "torch_threads": torch.get_num_threads()}
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model, tokenizer = load_causal_lm(EMBEDDED_ALIAS, dtype=dtype)
        one = measure_sampling_throughput(model, tokenizer, prompts[:4], 1, max_new_tokens)
        batched = measure_sampling_throughput(model, tokenizer, prompts, 32, max_new_tokens)
        result[precision] = {"batch1_tokens_per_s": one, "batch32_tokens_per_s": batched, "speedup": batched / one}
    return result


def bench_solver_backends(max_new_tokens: int = 64) -> dict:
    """Solver tokens/s through the search's LLM backends on the embedded model: HFLLM (bf16 weights where
    bf16 is native, else fp32, as `--dtype auto` loads it) at batch 1 and 32, and OpenAILLM against a
    llama.cpp server on the model's Q4_1 GGUF (4-bit weights: not our numerics), one request at a time and
    32 in flight. Sampling at temperature 1 without stop strings, as in `bench_sampling`; tokens/s is
    completion tokens over wall time, prefill included."""
    import importlib.util

    import torch

    from benchmarks.llama_server import embedded_gguf, llama_server
    from codeplay_lightning.llm import HFLLM, LLM, LLMUsage, OpenAILLM
    from codeplay_lightning.models import EMBEDDED_ALIAS, SamplingConfig, load_causal_lm, native_bf16

    prompts = solver_prompts(32)
    sampling = SamplingConfig(max_new_tokens)

    def tokens_per_s(llm: LLM, workload: list[str]) -> float:
        llm.complete(workload[:1])  # warm-up, not timed
        llm.usage = LLMUsage()
        llm.complete(workload)
        return llm.usage.completion_tokens / llm.usage.seconds

    dtype = torch.bfloat16 if native_bf16("cpu") else torch.float32
    model, tokenizer = load_causal_lm(EMBEDDED_ALIAS, dtype=dtype)
    hf = {
        batch_size: HFLLM(
            model, tokenizer, sampling, chat=False, batch_size=batch_size, generator=torch.Generator().manual_seed(0)
        )
        for batch_size in (1, 32)
    }
    hf_batch1 = tokens_per_s(hf[1], prompts[:4])  # as in bench_sampling: one at a time is slow
    hf_batch32 = tokens_per_s(hf[32], prompts)
    result = {
        "model": EMBEDDED_ALIAS,
        "prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "torch_threads": torch.get_num_threads(),
        "hf_dtype": str(dtype).removeprefix("torch."),
        "hf_batch1_tokens_per_s": hf_batch1,
        "hf_batch32_tokens_per_s": hf_batch32,
        "hf_batch32_over_batch1": hf_batch32 / hf_batch1,
    }
    if importlib.util.find_spec("llama_cpp") is None:
        result["server_skipped"] = "llama_cpp is not installed (make install-server)"
        return result
    with llama_server(embedded_gguf(), threads=torch.get_num_threads()) as base_url:
        for concurrency in (1, 32):
            llm = OpenAILLM(base_url, EMBEDDED_ALIAS, sampling, chat=False, concurrency=concurrency, seed=0)
            result[f"server_concurrency{concurrency}_tokens_per_s"] = speed = tokens_per_s(llm, prompts)
            result[f"server_concurrency{concurrency}_over_hf_batch1"] = speed / hf_batch1
    return result


def measure_sampling_throughput(
    model,
    tokenizer,
    prompts: list[str],
    batch_size: int,
    max_new_tokens: int,
) -> float:
    """Tokens per second generated while sampling one continuation per prompt, `batch_size` at a time.

    Sampling is at temperature 1 with no stop strings, so rows run to `max_new_tokens` unless they
    sample eos; only tokens actually generated count. One untimed 2-token batch warms up first.
    For bf16, call this inside `torch.autocast(device_type, dtype=torch.bfloat16)`.
    """
    import torch

    from codeplay_lightning.models.sampling import SamplingConfig, sample

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


def bench_setter_sampler(streams: int = 8, steps: int = 96) -> dict:
    """Setter sampling tokens/s: `sample_streams` (the training loop's sampler: streams restart at each
    puzzle's end) against Hugging Face `generate` sampling the same number of tokens per row at the
    same batch, on the Setter prompt, bf16 autocast over fp32 weights as in training."""
    import torch

    from codeplay_lightning.models import EMBEDDED_ALIAS, SamplingConfig, load_causal_lm, sample_streams
    from codeplay_lightning.puzzles import SETTER_STOP, fewshot_puzzles
    from codeplay_lightning.setter.rollout import setter_sampling_prompt

    model, tokenizer = load_causal_lm(EMBEDDED_ALIAS)
    examples = fewshot_puzzles()[:6]
    prompt = setter_sampling_prompt(tokenizer, examples)
    prompt_ids = tokenizer([prompt] * streams, return_tensors="pt")

    def ours() -> int:
        generators = [torch.Generator().manual_seed(seed) for seed in range(streams)]
        samples = sample_streams(
            model, tokenizer, prompt, steps, SamplingConfig(steps, 0.8, 1.0, SETTER_STOP), generators
        )
        return sum(len(ids) for ids in samples.token_ids)

    def hugging_face() -> int:
        output = model.generate(
            **prompt_ids,
            do_sample=True,
            temperature=0.8,
            top_k=0,
            max_new_tokens=steps,
            min_new_tokens=steps,
            pad_token_id=tokenizer.eos_token_id,
        )
        return (output.shape[1] - prompt_ids["input_ids"].shape[1]) * streams

    speeds = {}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for name, run in (("sample_streams", ours), ("hf_generate", hugging_face)):
            started = time.perf_counter()
            tokens = run()
            speeds[name] = tokens / (time.perf_counter() - started)
    return {
        "streams": streams,
        "steps": steps,
        "sample_streams_tokens_per_s": speeds["sample_streams"],
        "hf_generate_tokens_per_s": speeds["hf_generate"],
        "sampler_over_generate": speeds["sample_streams"] / speeds["hf_generate"],
    }
