"""Paper table 7: one step of a Code World Model against one step of the true environment and one LLM call.

On CartPole-v1: the example model (`cwm/examples/cartpole.py`) stepped in this process and in its
sandbox (a fresh process per transition, as scoring does), gymnasium's own `step`, and one
completion of the embedded model on the model-writing prompt.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).parents[1] / "codeplay_lightning" / "cwm" / "examples" / "cartpole.py"


def bench_cwm(steps: int = 2000, llm_tokens: int = 128) -> dict:
    import torch

    from codeplay_lightning.cwm import harness
    from codeplay_lightning.cwm.collect import collect
    from codeplay_lightning.cwm.envs import description, make
    from codeplay_lightning.cwm.task import CWMTask
    from codeplay_lightning.execution import Sandbox
    from codeplay_lightning.llm import load_llm
    from codeplay_lightning.models import SamplingConfig

    code = EXAMPLE.read_text()
    data = collect("CartPole-v1", seed=0)
    sample = data.select(np.arange(len(data)) < steps)
    namespace: dict = {}
    exec(compile(code, str(EXAMPLE), "exec"), namespace)
    model = namespace["Environment"]()
    started = time.perf_counter()
    for state, action in zip(sample.observations, sample.actions):
        model.set_state(state.astype(np.float32))
        model.step(int(action))
    in_process = (time.perf_counter() - started) / len(sample)

    with Sandbox(workers=1, timeout=60.0, modules=("numpy",)) as sandbox:
        harness.predict(sandbox, code, data.select(np.arange(len(data)) < 1))  # the warden starts: not a step's cost
        started = time.perf_counter()
        harness.predict(sandbox, code, sample)
        sandboxed = (time.perf_counter() - started) / len(sample)
        prompt = CWMTask("CartPole-v1", description("CartPole-v1"), data, sandbox).generate_prompt("")

    env = make("CartPole-v1")
    env.reset(seed=0)
    started, count = time.perf_counter(), 0
    while count < steps:
        _, _, terminated, truncated, _ = env.step(int(count % 2))
        count += 1
        if terminated or truncated:
            env.reset()
    true_step = (time.perf_counter() - started) / steps

    llm = load_llm(
        "smollm2-135m-sft",
        SamplingConfig(max_new_tokens=llm_tokens, temperature=1.0, top_p=0.8),
        dtype=torch.bfloat16,
        generator=torch.Generator().manual_seed(0),
    )
    started = time.perf_counter()
    llm.complete([prompt])
    llm_call = time.perf_counter() - started
    return {
        "transitions": len(sample),
        "cwm_step_us": in_process * 1e6,
        "cwm_sandboxed_step_us": sandboxed * 1e6,
        "true_env_step_us": true_step * 1e6,
        "llm_call_s": llm_call,
        "llm_completion_tokens": llm.usage.completion_tokens,
        "cwm_over_true_env": in_process / true_step,
        "llm_call_over_cwm_step": llm_call / in_process,
    }
