"""Judged puzzles per hour of one CPU-scale training iteration: this tree against the code before the
loop was made faster (`BASELINE`, from git), same config and seed, side by side (at the baseline's
CPU scale, and each tree at its own); and this tree's iteration at today's scale against the limit,
the bare model's work on the iteration's own tokens.

The limit is the bare forward + backward (cross-entropy, no prompt) on the iteration's action
tokens, cut into its minibatches, times the PPO epochs, plus the iteration's measured Setter and
Solver sampling. What the loop adds on top (the old log-probs, the prompt, the value head, novelty,
the sandbox, glue) is the gap between the limit and the iteration.

Against the machine: the FLOPs the iteration's models need (`iteration_flops`) at this machine's matmul rate
(`roofline.py`) in the run's precision: at 64 rows for sampling, at 512 for scoring and the PPO update.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

BASELINE = "82623d9"  # main before issue 12: full prompt per row in PPO, Setter streams in rounds
# the CPU scale and model at BASELINE; at today's (32 streams, 16 few-shot puzzles) the baseline's
# full prompt per row outgrows 24 GiB and is killed, and it predates the warm start, so the two trees are
# compared at this one
PREVIOUS_SCALE = ("rollout.n_envs=8", "rollout.fewshot=6", "model.name=smollm2-135m")


def run_iteration(tree: Path, config: Path, runs: Path, overrides: tuple[str, ...] = ()) -> dict:
    """One training iteration by the code in `tree`, in a child process: its iterations.jsonl record,
    its wall time from start to exit and its own peak resident memory."""
    command = [
        sys.executable,
        "-m",
        "codeplay_lightning.cli",
        "train",
        str(config.resolve()),
        f"trainer.run_root={runs}",
        "trainer.iterations=1",
        *overrides,
    ]
    started = time.perf_counter()
    child = subprocess.Popen(
        command,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"the training iteration in {tree} failed (exit {child.returncode}):\n{stderr[-2000:]}")
    (record_file,) = runs.glob("**/version_0/iterations.jsonl")
    record = json.loads(record_file.read_text().splitlines()[-1])
    record["process_seconds"] = time.perf_counter() - started
    record["peak_rss_gib"] = usage.ru_maxrss / 2**20  # KiB on Linux
    record["puzzles_per_hour"] = record_puzzles(runs) * 3600 / record["seconds"]
    return record


def record_puzzles(runs: Path) -> int:
    (puzzles,) = runs.glob("**/version_0/puzzles.jsonl")
    return len(puzzles.read_text().splitlines())


def baseline_tree(directory: Path, commit: str = BASELINE) -> Path:
    """`commit`'s files, unpacked from this repository's history."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit], capture_output=True)
    if archive.returncode:
        raise RuntimeError(
            f"git archive {commit} failed (run the benchmarks from a clone with its history): "
            f"{archive.stderr.decode().strip()}"
        )
    tar_path = directory / "baseline.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(directory / "tree", filter="data")
    return directory / "tree"


def bare_update_seconds(action_tokens: int, puzzles: int, config_path: Path, precision: str) -> float:
    """The limit's PPO part: the bare model's forward + backward over the iteration's action tokens
    (puzzles rows of the mean length) in its minibatches, times the PPO epochs, in the run's `precision`."""
    import torch

    from codeplay_lightning.config import load_config
    from codeplay_lightning.models import load_causal_lm

    config = load_config([config_path])
    model, _ = load_causal_lm(config.model.name)
    length = max(round(action_tokens / max(puzzles, 1)), 1)
    minibatches = [len(rows) for rows in torch.arange(puzzles).tensor_split(config.ppo.n_minibatches) if len(rows)]
    generator = torch.Generator().manual_seed(0)

    def update(rows: int) -> None:
        ids = torch.randint(0, model.config.vocab_size, (rows, length + 1), generator=generator)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision.startswith("bf16")):
            logits = model(input_ids=ids[:, :-1]).logits.float()
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()

    update(minibatches[0])  # warm-up
    started = time.perf_counter()
    for rows in minibatches:
        update(rows)
    return (time.perf_counter() - started) * config.ppo.ppo_epochs


def iteration_flops(record: dict, config, run_dir: Path, model_config, tokenizer) -> dict[str, float]:
    """GFLOP the iteration's models need, by phase, counting each token once where the loop needs it: the
    Setter's prompt and every stream's every step; the Solver's few-shot block once, each valid puzzle's own
    prompt once and the completions; scoring (old log-probs and values) and each PPO epoch's forward + backward
    (3x the forward) over the action tokens and the prompt once per minibatch (its keys and values depend on the
    weights, which each minibatch's step changes). Linear layers only, 2 x weights per token forward (as in
    `roofline.py`): attention over the context is left out, so the ratio to it slightly flatters the loop."""
    from benchmarks.roofline import flops_per_token
    from codeplay_lightning.puzzles import fewshot_puzzles, solver_prompt
    from codeplay_lightning.puzzles.parsing import check_puzzle
    from codeplay_lightning.setter.rollout import setter_sampling_prompt

    examples = fewshot_puzzles()[: config.rollout.fewshot]
    setter_prompt = len(tokenizer(setter_sampling_prompt(tokenizer, examples))["input_ids"])
    puzzles = [json.loads(line) for line in (run_dir / "puzzles.jsonl").read_text().splitlines()]
    valid = [check_puzzle(puzzle["puzzle"]).puzzle for puzzle in puzzles if puzzle["valid"]]
    solver_prompts = tokenizer([solver_prompt(examples, puzzle) for puzzle in valid])["input_ids"]
    few_shot_block = len(os.path.commonprefix(solver_prompts)) if len(solver_prompts) > 1 else 0
    solver_prompt_tokens = few_shot_block + sum(len(ids) - few_shot_block for ids in solver_prompts)
    minibatch_prompts = config.ppo.n_minibatches * setter_prompt + record["action_tokens"]
    tokens = {
        "setter_sampling": setter_prompt + config.rollout.n_envs * config.rollout.n_steps,
        "solver": solver_prompt_tokens + record["solver_completion_tokens"],
        "old_logprobs_and_values": minibatch_prompts,
        "ppo_update": 3 * config.ppo.ppo_epochs * minibatch_prompts,
    }
    return {phase: count * flops_per_token(model_config) / 1e9 for phase, count in tokens.items()}


def iteration_over_flops(record: dict, config, run_dir: Path) -> dict:
    """The iteration's model time against its FLOPs at this machine's matmul rate in the run's precision."""
    import torch

    from benchmarks.roofline import roofline
    from codeplay_lightning.devices import resolved_precision
    from codeplay_lightning.models import load_causal_lm

    precision = resolved_precision(config.trainer)
    dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float32
    model, tokenizer = load_causal_lm(config.model.name)
    gflop = iteration_flops(record, config, run_dir, model.config, tokenizer)
    rates = {rows: roofline(model.config, rows, dtype)["gflops"] for rows in (64, 512)}
    seconds_at_rate = {
        phase: amount / rates[64 if phase in ("setter_sampling", "solver") else 512] for phase, amount in gflop.items()
    }
    measured = {phase: record[f"{phase}_seconds"] for phase in gflop}
    measured["solver"] -= record["sandbox_seconds"]
    return {
        "precision": precision,
        "matmul_gflops_64_rows": rates[64],
        "matmul_gflops_512_rows": rates[512],
        "gflop": gflop,
        "seconds_at_rate": seconds_at_rate,
        "seconds_measured": measured,
        "iteration_over_flops": record["seconds"] / sum(seconds_at_rate.values()),
    }


def bench_loop(config: str = "configs/balanced.yaml") -> dict:
    from codeplay_lightning.config import load_config
    from codeplay_lightning.devices import resolved_precision

    config_path = Path(config)
    if not config_path.is_file():
        raise ValueError(f"{config} not found: run the benchmarks from the repository root")
    loaded = load_config([config_path])
    # every tree at the precision `auto` resolves to here: the baseline predates `auto`
    precision = (f"trainer.precision={resolved_precision(loaded.trainer)}",)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        baseline_runs, previous_runs = scratch / "baseline", scratch / "previous_scale"
        baseline = run_iteration(baseline_tree(scratch), config_path, baseline_runs, PREVIOUS_SCALE + precision)
        previous_scale = run_iteration(Path.cwd(), config_path, previous_runs, PREVIOUS_SCALE + precision)
        current = run_iteration(Path.cwd(), config_path, scratch / "current", precision)
        (current_run,) = (scratch / "current").glob("**/version_0")
        against_flops = iteration_over_flops(current, loaded, current_run)
    sampling = current["setter_sampling_seconds"] + current["solver_seconds"] - current["sandbox_seconds"]
    bare = bare_update_seconds(current["action_tokens"], current["puzzles"], config_path, against_flops["precision"])
    limit = bare + sampling
    return {
        "config": config,
        "baseline_commit": BASELINE,
        "previous_scale": PREVIOUS_SCALE,
        "baseline": baseline,
        "current_at_previous_scale": previous_scale,
        "current": current,
        "limit_seconds": limit,
        "limit_bare_update_seconds": bare,
        "limit_sampling_seconds": sampling,
        "speedup_same_config": previous_scale["puzzles_per_hour"] / baseline["puzzles_per_hour"],
        "speedup_each_at_its_scale": current["puzzles_per_hour"] / baseline["puzzles_per_hour"],
        "iteration_over_limit": current["seconds"] / limit,
        "against_flops": against_flops,
    }
