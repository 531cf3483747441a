"""The GPU check's measurements at the paper's scale: `python -m benchmarks.gpu.check --out DIR`, after `pytest -m
gpu` (`run.sh` runs both). With `--device cpu --tiny`, the same steps on tiny shapes: what CI runs.

Steps, each recorded in DIR/check.json as soon as it ends (an error or the time budget stops only that step):
- `environment`: versions, the card, bf16, the cores, the sandbox's isolation there, the card's copy bandwidth.
- `decode_floor_<shape>`: one decode step's weight matmuls alone (bf16, 64 rows, every layer's own weights), eager
  and replayed as one CUDA graph: the step's floor on this card, beside the samplers below.
- `samplers_<shape>`: the Setter's `sample_streams` (64 streams x 128 steps behind the 16-shot prompt, fp32 weights
  under bf16 autocast, as the policy samples), the Solver's `sample` (64 rows x 128 tokens, 8 attempts a puzzle,
  bf16 weights, as the frozen copy samples) and Hugging Face `generate` on the same batch; tokens/s, the share of
  the memory-bandwidth limit (weights and KV cache read once a step) and where a step's time goes.
- `iterations_<shape>_<precision>`: `train()` on `configs/balanced.yaml configs/paper.yaml` at a learning rate too
  small to move a weight: each iteration's seconds by part, Setter tokens/s, peak GPU memory (flat?), the devices
  of the policy, the value head and the frozen copy, the optimizer (fused? steps taken), and the exactness scalars
  (clip fraction 0, approximate KL 0, the sampler's log-prob gap).
- `solver_<shape>`: the few-shot Solver as training calls it, on 64 puzzles of our corpus x 8 attempts, through the
  sandbox with one warden per core: a random model passes none of them, so this is its sampling and its verdicts.
- `sandbox`: verdicts per second on one warden per core against the machine's bare fork loop.
- `paper_iteration`: an iteration of the paper's scale composed from the parts above (random weights write no valid
  puzzle, so `train()`'s iterations run no Solver): the measured iteration plus the Solver's measured phase.

Random models of the two real shapes stand in for the hub's (`offline.py`): GPT-Neo-125M on the plain paths,
SmolLM2-135M on the shared-prefix and packed ones."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from benchmarks.gpu.offline import REPO, SHAPES, TOKENIZER_DIR, load_tokenizer, pin_eos, random_model, write_embedder
from benchmarks.sandbox import bare_forks_per_second, benchmark_programs
from codeplay_lightning.execution.api import usable_cores

CONFIGS = [REPO / "configs" / "balanced.yaml", REPO / "configs" / "paper.yaml"]
NEO, SMOL = "gpt-neo-125m", "smollm2-135m"
WORKERS = usable_cores()  # the sandbox speed's wardens: one per core (training uses paper.yaml's auto)
# (iterations of train(), the precision) per run; fp16 with its scaler only once, on the paper's model
RUNS = [(NEO, "bf16-mixed", 4), (SMOL, "bf16-mixed", 2), (NEO, "16-mixed", 2)]
TINY_SCALE = [  # the paper's settings, shrunk for a CPU in CI
    "rollout.n_envs=4",
    "rollout.n_steps=32",
    "rollout.fewshot=2",
    "solver.attempts=2",
    "solver.max_new_tokens=16",
    "ppo.n_minibatches=2",
    "ppo.ppo_epochs=1",
]


def paper_overrides(tiny: bool) -> list[str]:
    """What the GPU machine changes in the paper's config: no P3 files there (our corpus normalises R_n), and the
    tiny scale for a CPU. The sandbox's workers are paper.yaml's `auto`."""
    return ["reward.reference=null", "reward.reference_split=null", *(TINY_SCALE if tiny else [])]


@dataclass(frozen=True)
class Setting:
    device: torch.device
    tiny: bool  # tiny shapes and scale, for a CPU
    tokenizer: PreTrainedTokenizerBase
    workdir: Path  # the runs and the embedder, deleted at the end


class Check:
    """Runs named steps, each timed, and rewrites `out/check.json` after every one."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.budget_s, self.started = out, budget_s, time.perf_counter()
        self.results: dict[str, dict] = {}

    def step(self, name: str, measure: Callable[[], dict]) -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed > self.budget_s:
            self.results[name] = {"skipped": f"{elapsed:.0f} s had passed, past the {self.budget_s:.0f} s budget"}
        else:
            began = time.perf_counter()
            try:
                self.results[name] = measure()
            except Exception as error:  # noqa: BLE001 - the other steps' figures must still come back
                self.results[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
            self.results[name]["seconds"] = round(time.perf_counter() - began, 2)
        shown = {key: value for key, value in self.results[name].items() if key != "traceback"}
        print(f"[{time.perf_counter() - self.started:6.1f} s] {name}: {json.dumps(shown)[:1500]}", flush=True)
        self.save()

    def save(self) -> None:
        (self.out / "check.json").write_text(json.dumps(self.results, indent=1) + "\n")

    def failed(self) -> list[str]:
        return [name for name, result in self.results.items() if "error" in result]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_of(run: Callable[[], object], device: torch.device, repeats: int = 1) -> float:
    """Wall seconds per call of `run`, after one call to warm it up, with the device's queue drained."""
    run()
    synchronize(device)
    began = time.perf_counter()
    for _ in range(repeats):
        run()
    synchronize(device)
    return (time.perf_counter() - began) / repeats


def environment(device: torch.device) -> dict:
    import lightning
    import transformers

    from codeplay_lightning.execution import Sandbox

    found = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "lightning": lightning.__version__,
        "cpus": os.cpu_count(),
        "device": str(device),
    }
    with Sandbox(workers=1) as sandbox:
        found["sandbox_isolation"] = sandbox.isolation
    if device.type == "cuda":
        card = torch.cuda.get_device_properties(device)
        found |= {
            "gpu": card.name,
            "gpu_gib": round(card.total_memory / 2**30, 1),
            "capability": list(torch.cuda.get_device_capability(device)),
            "multiprocessors": card.multi_processor_count,
            "bf16": torch.cuda.is_bf16_supported(),
            "cuda": torch.version.cuda,
            "copy_gb_per_s": round(copy_bandwidth(device) / 1e9),
        }
    return found


def copy_bandwidth(device: torch.device) -> float:
    """Bytes per second a device-to-device copy of 512 MiB (far past the L2) reads and writes: the bandwidth a
    decode step can reach."""
    source = torch.empty(2**29, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    return 2 * source.numel() / seconds_of(lambda: target.copy_(source), device, repeats=20)


def linear_shapes(model: nn.Module) -> list[tuple[int, int]]:
    """(in, out) of every linear layer a decode step runs once per token, the output layer included."""
    return [(layer.in_features, layer.out_features) for layer in model.modules() if isinstance(layer, nn.Linear)]


def decode_floor(shape: str, setting: Setting, rows: int = 64) -> dict:
    """The decode step's weight matmuls alone at `rows` rows, bf16, every layer its own weights: eager, and (CUDA)
    replayed as one CUDA graph, the floor of a step that reads each weight once and does nothing else."""
    device = setting.device
    shapes = linear_shapes(random_model(shape, setting.tokenizer, tiny=setting.tiny))
    weights = [torch.randn(out, inner, device=device, dtype=torch.bfloat16) for inner, out in shapes]
    inputs = {inner: torch.randn(rows, inner, device=device, dtype=torch.bfloat16) for inner, _ in shapes}
    weight_bytes = sum(weight.numel() * weight.element_size() for weight in weights)

    def step() -> None:
        for (inner, _), weight in zip(shapes, weights):
            torch.nn.functional.linear(inputs[inner], weight)

    eager = seconds_of(step, device, repeats=20)
    found = {
        "rows": rows,
        "matmuls": len(shapes),
        "weight_mb": round(weight_bytes / 1e6, 1),
        "eager_step_ms": round(eager * 1e3, 3),
        "eager_tokens_per_s": round(rows / eager),
    }
    if device.type == "cuda":
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
            step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        replay = seconds_of(graph.replay, device, repeats=200)
        found |= {
            "graph_step_ms": round(replay * 1e3, 3),
            "graph_tokens_per_s": round(rows / replay),
            "graph_gb_per_s": round(weight_bytes / replay / 1e9),
        }
    return found


def kv_bytes_per_token(model: nn.Module, element_bytes: int) -> int:
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * 2 * heads * head_dim * element_bytes


def samplers(shape: str, setting: Setting) -> dict:
    """Setter streams, the Solver's batch and `generate` at the paper's batch, on one random model of `shape`."""
    from benchmarks.models import solver_prompts
    from codeplay_lightning.models import SamplingConfig, sample, sample_streams
    from codeplay_lightning.models.architectures import attention_paths
    from codeplay_lightning.puzzles import SETTER_STOP, fewshot_puzzles
    from codeplay_lightning.setter.rollout import setter_sampling_prompt

    device, tokenizer, tiny = setting.device, setting.tokenizer, setting.tiny
    rows, steps, fewshot, attempts = (4, 16, 2, 2) if tiny else (64, 128, 16, 8)
    prompt = setter_sampling_prompt(tokenizer, fewshot_puzzles()[:fewshot])
    prompt_tokens = len(tokenizer(prompt)["input_ids"])
    policy = random_model(shape, tokenizer, tiny=tiny).to(device)
    pin_eos(policy, tokenizer, prompt, temperature=0.8)
    frozen = random_model(shape, tokenizer, tiny=tiny).to(device, torch.bfloat16)  # eos not pinned: rows run full
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    generators = lambda: [torch.Generator().manual_seed(row) for row in range(rows)]  # noqa: E731
    solver_rows = solver_prompts(rows, fewshot=fewshot, attempts=attempts)
    batch = tokenizer([prompt] * rows, return_tensors="pt").to(device)
    counted: dict[str, int] = {}

    def streams() -> None:
        sampled = sample_streams(
            policy, tokenizer, prompt, steps, SamplingConfig(steps, 0.8, 1.0, SETTER_STOP), generators()
        )
        counted["setter_streams"] = sum(len(ids) for ids in sampled.token_ids)
        counted["puzzles_finished"] = sum(sampled.finished)

    def solver() -> None:  # no stop strings: every row runs its whole budget, as the roofline counts
        sampled = sample(frozen, tokenizer, solver_rows, SamplingConfig(steps, 0.8), generators())
        counted["solver_sample"] = sum(len(ids) for ids in sampled.token_ids)

    def generate() -> None:
        output = frozen.generate(
            **batch, do_sample=True, temperature=0.8, top_k=0, max_new_tokens=steps, min_new_tokens=steps
        )
        counted["hf_generate"] = (output.shape[1] - batch["input_ids"].shape[1]) * rows

    fast = attention_paths(policy).fast
    weight_bytes = 2 * sum(inner * out for inner, out in linear_shapes(policy))  # bf16, read once a step
    per_token = kv_bytes_per_token(policy, 2)
    # KV bytes a step reads, on average over the steps: the fast path holds the prompt once and a static cache of
    # `steps` slots per row; the plain path and `generate` hold the prompt in every row and grow by a slot a step
    kv_bytes = {
        "setter_streams": per_token * ((prompt_tokens + rows * steps) if fast else rows * (prompt_tokens + steps / 2)),
        "solver_sample": per_token * rows * (len(tokenizer(solver_rows[0])["input_ids"]) + steps / 2),
        "hf_generate": per_token * rows * (prompt_tokens + steps / 2),
    }
    found = {"path": "shared prefix" if fast else "plain", "rows": rows, "steps": steps, "prompt_tokens": prompt_tokens}
    bandwidth = copy_bandwidth(device) if device.type == "cuda" else None  # measured beside the samplers
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with autocast:
        for name, run in (("setter_streams", streams), ("solver_sample", solver), ("hf_generate", generate)):
            seconds = seconds_of(run, device)
            step_s = seconds / steps
            found[name] = {
                "tokens": counted[name],
                "seconds": round(seconds, 3),
                "tokens_per_s": round(counted[name] / seconds),
                "step_ms": round(step_s * 1e3, 2),
                "bytes_per_step_mb": round((weight_bytes + kv_bytes[name]) / 1e6, 1),
            }
            if bandwidth:
                limit_s = (weight_bytes + kv_bytes[name]) / bandwidth
                found[name]["of_bandwidth_limit"] = round(limit_s / step_s, 4)
        found["setter_streams"]["puzzles_finished"] = counted["puzzles_finished"]
        if device.type == "cuda":
            found["setter_step_profile"] = step_profile(streams, device)
            found["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return found


def step_profile(run: Callable[[], None], device: torch.device) -> dict:
    """One run under the profiler: the GPU's busy time against the wall time (a launch-bound step leaves the GPU
    idle), the number of kernels, and the host operators that take the most time."""
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    began = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        run()
        synchronize(device)
    wall = time.perf_counter() - began  # the profiler's own overhead included
    events = profiler.key_averages()
    kernels = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(event.self_device_time_total for event in kernels)
    by_host_time = sorted(events, key=lambda event: -event.self_cpu_time_total)[:8]
    return {
        "wall_ms": round(wall * 1e3, 1),
        "gpu_busy_ms": round(busy_us / 1e3, 1),
        "kernel_launches": sum(event.count for event in kernels),
        "top_host_ops_ms": {event.key: round(event.self_cpu_time_total / 1e3, 1) for event in by_host_time},
    }


class Observed(L.Callback):
    """What a run's own records do not say: where each model's weights sit, the optimizer (fused? steps taken)
    and the fp16 scaler's final scale."""

    def __init__(self):
        self.found: dict = {}

    def on_train_epoch_start(self, trainer: L.Trainer, module) -> None:
        if "devices" not in self.found:
            frozen = module.frozen
            self.found["devices"] = {
                "policy": str(next(module.policy.parameters()).device),
                "value_head": str(next(module.value_head.parameters()).device),
                "frozen": None if frozen is None else str(next(frozen.parameters()).device),
                "frozen_dtype": None if frozen is None else str(next(frozen.parameters()).dtype),
            }

    def on_fit_end(self, trainer: L.Trainer, module) -> None:
        optimizer = trainer.optimizers[0]
        steps = [int(state["step"]) for state in optimizer.state.values() if "step" in state]
        self.found["optimizer"] = {"fused": bool(optimizer.defaults.get("fused")), "steps": max(steps, default=0)}
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        if scaler is not None:
            self.found["fp16_scale"] = float(scaler.get_scale())


class IterationWall(L.Callback):
    """Wall seconds from one iteration's end to the next one's: a later iteration's time with the previous one's
    checkpoint in it (Lightning runs the checkpoint callback's hooks last), the first one's from the start of fit."""

    def __init__(self):
        self.seconds: list[float] = []
        self.last = 0.0

    def on_train_start(self, trainer: L.Trainer, module) -> None:
        self.last = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, module) -> None:
        now = time.perf_counter()
        self.seconds.append(now - self.last)
        self.last = now


def logged_scalars(run_dir: Path, tags: tuple[str, ...]) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = run_dir.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    present = set(accumulator.Tags()["scalars"])
    return {tag: [event.value for event in accumulator.Scalars(tag)] for tag in tags if tag in present}


def iterations(shape: str, precision: str, count: int, setting: Setting) -> dict:
    """`count` iterations of `train()` at the paper's scale on a random model of `shape`, at lr 1e-30."""
    from codeplay_lightning.config import load_config
    from codeplay_lightning.puzzles import fewshot_puzzles
    from codeplay_lightning.setter.rollout import setter_sampling_prompt
    from codeplay_lightning.train import train

    device, tokenizer, tiny = setting.device, setting.tokenizer, setting.tiny
    embedder = setting.workdir / "embedder"
    if not embedder.is_dir():
        write_embedder(embedder, tokenizer)
    overrides = [
        f"trainer.run_root={setting.workdir / 'runs' / f'{shape}-{precision}'}",
        f"trainer.iterations={count}",
        f"trainer.precision={precision}",
        f"trainer.accelerator={'gpu' if device.type == 'cuda' else 'cpu'}",
        "ppo.lr=1e-30",  # no weight moves: the PPO ratio must be 1 (speed does not depend on it)
        f"reward.embedder={embedder}",
    ]
    config = load_config(CONFIGS, paper_overrides(tiny) + overrides)
    policy = random_model(shape, tokenizer, tiny=tiny)
    examples = fewshot_puzzles()[: config.rollout.fewshot]
    pin_eos(policy, tokenizer, setter_sampling_prompt(tokenizer, examples), config.rollout.temperature)
    observed, wall = Observed(), IterationWall()
    run_dir = train(config, policy=policy, tokenizer=tokenizer, callbacks=[observed, wall])
    records = [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]
    scalars = logged_scalars(run_dir, ("ppo/clip_frac", "ppo/approx_kl", "rollout/sampler_logprob_gap"))
    setter_tokens = config.rollout.n_envs * config.rollout.n_steps
    return {
        "overrides": overrides,
        **observed.found,
        "exactness": scalars,
        "iterations": [
            {
                **{key: round(value, 3) if isinstance(value, float) else value for key, value in record.items()},
                "setter_tokens_per_s": round(setter_tokens / record["setter_sampling_seconds"]),
                "wall_s": round(seconds, 2),
            }
            for record, seconds in zip(records, wall.seconds)
        ],
    }


def solver_phase(shape: str, setting: Setting) -> dict:
    """The few-shot Solver of the paper's config on 64 corpus puzzles (N_a = 8, 128 tokens, 16-shot prompt) on the
    frozen copy's bf16 weights, through the sandbox at one warden per core (at most 16)."""
    from codeplay_lightning.config import load_config
    from codeplay_lightning.corpus import reference_puzzles
    from codeplay_lightning.execution import Sandbox
    from codeplay_lightning.llm import HFLLM
    from codeplay_lightning.puzzles import fewshot_puzzles
    from codeplay_lightning.solver import FewShotSolver, solver_sampling

    device, tokenizer, tiny = setting.device, setting.tokenizer, setting.tiny
    config = load_config(CONFIGS, paper_overrides(tiny)).solver
    puzzles = reference_puzzles()[: 4 if tiny else 64]
    model = random_model(shape, tokenizer, tiny=tiny).to(device, torch.bfloat16)
    generator = torch.Generator().manual_seed(0)
    llm = HFLLM(
        model, tokenizer, solver_sampling(config), chat=False, batch_size=config.batch_size, generator=generator
    )
    fewshot = 2 if tiny else 16
    with Sandbox(workers=WORKERS) as sandbox:
        solver = FewShotSolver(llm, sandbox, fewshot_puzzles()[:fewshot], config)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            began = time.perf_counter()
            results = solver.solve(puzzles)
            seconds = time.perf_counter() - began
        sandbox_s = sandbox.busy_seconds
    programs = sum(result.attempts for result in results)
    return {
        "puzzles": len(puzzles),
        "programs": programs,
        "passes": sum(result.passes for result in results),
        "solve_seconds": round(seconds, 2),
        "sampling_seconds": round(seconds - sandbox_s, 2),
        "sandbox_seconds": round(sandbox_s, 2),
        "completion_tokens": llm.usage.completion_tokens,
        "sampling_tokens_per_s": round(llm.usage.completion_tokens / max(seconds - sandbox_s, 1e-9)),
    }


def sandbox_speed(tiny: bool) -> dict:
    """Verdicts per second over programs each with an f of its own, one warden per usable core, against
    as many bare fork loops of a minimal Python."""
    from codeplay_lightning.execution import Sandbox

    count = 200 if tiny else 3000
    programs = benchmark_programs(count)
    with Sandbox(workers=WORKERS) as sandbox:
        sandbox.verify(programs[:50])  # start-up is not what is measured
        began = time.perf_counter()
        verdicts = sandbox.verify(programs)
        seconds = time.perf_counter() - began
        isolation = sandbox.isolation
    bare = bare_forks_per_second(count // WORKERS + 1, loops=WORKERS)
    statuses = [verdict.status for verdict in verdicts]
    return {
        "workers": WORKERS,
        "programs": count,
        "isolation": isolation,
        "verdicts_per_s": round(count / seconds),
        "bare_forks_per_s": round(bare),
        "fraction_of_bare_forks": round(count / seconds / bare, 3),
        "statuses": {status: statuses.count(status) for status in sorted(set(statuses))},
    }


def paper_iteration(results: dict) -> dict:
    """The paper's iteration composed of measured parts: the later iterations of the GPT-Neo bf16 run (the first
    pays for warming up; each holds its predecessor's checkpoint) plus the Solver's phase, scaled to the valid
    puzzles a trained Setter writes there."""
    run = results.get(f"iterations_{NEO}_bf16-mixed", {}).get("iterations", [])
    solver = results.get(f"solver_{NEO}", {})
    if len(run) < 2 or "solve_seconds" not in solver:
        return {"missing": "the GPT-Neo bf16 iterations (two or more) or its Solver phase"}
    steady = run[1:]
    valid = 64  # about what the CPU runs' valid share (0.6-0.7 of ~100 puzzles an iteration) gives at 64 streams
    solver_s = solver["solve_seconds"] * valid / solver["puzzles"]
    without_solver = sum(record["wall_s"] for record in steady) / len(steady)
    return {
        "valid_puzzles_assumed": valid,
        "iteration_without_solver_s": round(without_solver, 2),
        "solver_phase_s": round(solver_s, 2),
        "paper_iteration_s": round(without_solver + solver_s, 2),
        "fifty_iterations_min": round(50 * (without_solver + solver_s) / 60, 1),
        "peak_gpu_gib_by_iteration": [record.get("peak_gpu_gib") for record in run],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu.check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for check.json")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and scale (a CPU run in CI)")
    parser.add_argument("--tokenizer", type=Path, default=TOKENIZER_DIR, help="SmolLM2's (prepare.sh copies it)")
    parser.add_argument("--budget-s", type=float, default=330.0, help="no step starts after this many seconds")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device (--device cpu --tiny runs the CPU version)")
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.budget_s)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as workdir:
        setting = Setting(torch.device(args.device), args.tiny, load_tokenizer(args.tokenizer), Path(workdir))
        check.step("environment", lambda: environment(setting.device))
        for shape in SHAPES:
            check.step(f"decode_floor_{shape}", lambda shape=shape: decode_floor(shape, setting))
        for shape in SHAPES:
            check.step(f"samplers_{shape}", lambda shape=shape: samplers(shape, setting))
        for shape, precision, count in RUNS:
            if args.device == "cpu" and precision == "16-mixed":
                precision = "32-true"  # Lightning runs 16-mixed as bf16-mixed on a CPU
            run = (shape, precision, 2 if args.tiny else count)
            check.step(f"iterations_{shape}_{precision}", lambda run=run: iterations(*run, setting))
        check.step(f"solver_{NEO}", lambda: solver_phase(NEO, setting))
    check.step("sandbox", lambda: sandbox_speed(args.tiny))
    check.step("paper_iteration", lambda: paper_iteration(check.results))
    check.results["total"] = {"seconds": round(time.perf_counter() - check.started, 1)}
    check.save()
    print(f"check.json written to {args.out}; failed steps: {', '.join(check.failed()) or 'none'}")
    return 1 if check.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
