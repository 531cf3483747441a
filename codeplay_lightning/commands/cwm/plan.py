"""`codeplay cwm plan`: plan in the real environment with a model, for the normalised return R."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from codeplay_lightning.commands.cwm.args import env_ids, program, sandbox

HELP = "plan in the real environment with a model: normalised return R"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True)
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--program", help="a Python file defining class Environment")
    model.add_argument("--true-env", action="store_true", help="the true environment's code as the model")
    parser.add_argument(
        "--paper-scale",
        action="store_true",
        help="the paper's planners (CEM: 1,000 samples x 100 steps x 20 iterations; full episodes); "
        "default: the CPU settings of codeplay_lightning/cwm/plan.py",
    )
    parser.add_argument("--episodes", type=int, help="episodes per policy (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="directory for planning.json")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict, replace

    from codeplay_lightning.cwm.plan import CPU, PAPER, evaluate_planning, model_policy, true_model_policy

    settings = PAPER if args.paper_scale else CPU
    if args.episodes is not None:
        if args.episodes < 1:
            raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
        settings = replace(settings, episodes=args.episodes)
    env_id = env_ids(args.env)[0]
    started = time.perf_counter()
    with sandbox() as box:
        model = (
            true_model_policy(env_id, settings)
            if args.true_env
            else model_policy(env_id, program(args.program), box, settings)
        )
        result = evaluate_planning(env_id, model, settings, seed=args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = result.to_dict() | {
        "model": "true environment" if args.true_env else args.program,
        "settings": asdict(settings),
        "seconds": time.perf_counter() - started,
    }
    (out / "planning.json").write_text(json.dumps(record, indent=1) + "\n")
    means = [
        sum(returns) / len(returns) for returns in (result.random_returns, result.true_returns, result.model_returns)
    ]
    print(
        f"  {env_id}: R = {result.normalised:.3f} ± {result.normalised_error:.3f}  (mean returns: random "
        f"{means[0]:.2f}, oracle {means[1]:.2f}, model {means[2]:.2f})"
    )
    if result.model_bug:
        print(f"  the model failed: {result.model_bug[:300]}")
    print(f"written to {out / 'planning.json'}")
    return 0
