"""Solver sampling as `codeplay evaluate` runs it, by this tree and by the tree before the sampling engine
(`BASELINE`, from git: a batch of rows ran until its longest row finished), side by side in one run.

The workload: `PUZZLES` bundled puzzles x `ATTEMPTS` attempts of up to the Solver's 96 tokens, the few-shot Solver's
prompts and stop strings, the embedded model in the dtype `--dtype auto` picks, the Solver's batch of rows, one seed.
Each tree runs in a child process of its own (`python benchmarks/engine.py TREE`), alternating, `ROUNDS` times;
only the LLM's calls are timed (the sandbox is left out: every attempt is judged a failure). Both trees must sample
the same completions (up to float rounding in a bf16 batch: the share that agree is reported).

The roofline (`roofline.py`, at the batch's rows, the same dtype) is measured just before and after each child, and
each tree's tokens/s is also given as a fraction of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = "7bb6c91"  # main before issue 55: `sample()` in batches of rows, each until its longest row ends
PUZZLES, ATTEMPTS, ROUNDS = 40, 8, 2


def child(out: Path) -> None:
    """In a child process, whichever tree PYTHONPATH names: sample the workload, write its figures to `out`."""
    import torch

    from codeplay_lightning.commands.args import model_dtype
    from codeplay_lightning.config import WARMSTART_ALIAS, RolloutConfig, SolverConfig
    from codeplay_lightning.execution import Verdict
    from codeplay_lightning.llm import load_llm
    from codeplay_lightning.puzzles import bundled_puzzles, fewshot_puzzles
    from codeplay_lightning.solver import FewShotSolver, solver_sampling

    class Failing:
        """Every attempt fails: the sandbox is not what is timed."""

        def verify(self, programs):
            return [Verdict("fail", "", 0.0) for _ in programs]

    config = SolverConfig(attempts=ATTEMPTS)
    dtype = model_dtype("auto", "cpu")
    llm = load_llm(
        WARMSTART_ALIAS,
        solver_sampling(config),
        chat=False,
        dtype=dtype,
        batch_size=config.batch_size,
        generator=torch.Generator().manual_seed(0),
    )
    seconds, completions = 0.0, []
    complete = llm.complete

    def timed(prompts):
        nonlocal seconds
        started = time.perf_counter()
        texts = complete(prompts)
        seconds += time.perf_counter() - started
        completions.extend(texts)
        return texts

    llm.complete = timed
    solver = FewShotSolver(llm, Failing(), fewshot_puzzles()[: RolloutConfig.fewshot], config)
    solver.solve(bundled_puzzles()[:PUZZLES])
    figures = {
        "seconds": seconds,
        "completion_tokens": llm.usage.completion_tokens,
        "tokens_per_s": llm.usage.completion_tokens / seconds,
        "rows": config.batch_size,
        "dtype": str(dtype).removeprefix("torch."),
        "completions": completions,
    }
    out.write_text(json.dumps(figures))


def run_child(tree: Path, out: Path) -> dict:
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(out)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def bench_engine() -> dict:
    import torch

    from benchmarks.loop import baseline_tree
    from benchmarks.roofline import roofline
    from codeplay_lightning.commands.args import model_dtype
    from codeplay_lightning.config import SolverConfig
    from codeplay_lightning.models import EMBEDDED_ALIAS, load_causal_lm

    rows = SolverConfig().batch_size
    dtype = model_dtype("auto", "cpu")
    model_config = load_causal_lm(EMBEDDED_ALIAS, dtype=torch.float32)[0].config
    trees = {"this tree": Path.cwd()}
    runs: dict[str, list[dict]] = {name: [] for name in ("this tree", "baseline")}
    with tempfile.TemporaryDirectory() as scratch:
        trees["baseline"] = baseline_tree(Path(scratch), BASELINE)
        for _ in range(ROUNDS):
            for name, tree in trees.items():
                before = roofline(model_config, rows, dtype)["tokens_per_s"]
                figures = run_child(tree, Path(scratch) / "figures.json")
                figures["roofline_tokens_per_s"] = (before + roofline(model_config, rows, dtype)["tokens_per_s"]) / 2
                runs[name].append(figures)
    ours, theirs = runs["this tree"], runs["baseline"]
    agree = [a == b for run, base in zip(ours, theirs) for a, b in zip(run["completions"], base["completions"])]
    best = {name: max(run["tokens_per_s"] for run in result) for name, result in runs.items()}
    return {
        "baseline_commit": BASELINE,
        "workload": f"{PUZZLES} puzzles x {ATTEMPTS} attempts, {rows} rows, {ours[0]['dtype']}",
        "this_tree_tokens_per_s": [run["tokens_per_s"] for run in ours],
        "baseline_tokens_per_s": [run["tokens_per_s"] for run in theirs],
        "speedup": best["this tree"] / best["baseline"],
        "this_tree_of_roofline": max(run["tokens_per_s"] / run["roofline_tokens_per_s"] for run in ours),
        "baseline_of_roofline": max(run["tokens_per_s"] / run["roofline_tokens_per_s"] for run in theirs),
        "same_completions": sum(agree) / len(agree),
    }


if __name__ == "__main__":
    child(Path(sys.argv[1]))
