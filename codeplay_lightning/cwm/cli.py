"""`codeplay cwm ...`: build the benchmark's data, score a model, synthesize models, plan with them.

    codeplay cwm build --out DIR [--envs ID,...] [--seed S] [--official DIR]
    codeplay cwm score --data DIR --env ID (--program FILE | --true-env)
    codeplay cwm synthesize --data DIR --env ID[,ID...] --method M --budget B --llm SPEC --out DIR
    codeplay cwm plan --env ID (--program FILE | --true-env) [--paper-scale] [--episodes N] --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from codeplay_lightning.devices import add_device_option

if TYPE_CHECKING:
    import torch

CWM_WORKERS = 2  # sandbox wardens: a model's transitions are scored two at a time
CWM_TIMEOUT = 60.0  # seconds per sandbox call: one transition scored, or one plan
CWM_MEMORY_MB = 2048


def add_commands(commands) -> None:
    cwm = commands.add_parser("cwm", help="Code World Models: benchmark data, scoring, synthesis, planning")
    actions = cwm.add_subparsers(dest="cwm_command", required=True)

    build = actions.add_parser("build", help="collect seeded transitions of the CWMB environments")
    build.add_argument("--out", required=True, help="directory for <env id>.npz and summary.json")
    build.add_argument("--envs", help="comma-separated environment ids (default: all 18)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--official", metavar="DIR",
                       help="also convert the official buffers: DIR/<env id>/train_buffer.pkl to DIR_OUT/official/")
    build.set_defaults(run=run_build)

    score = actions.add_parser("score", help="a model's accuracy: ours (search and held-out) and the official one")
    score.add_argument("--data", required=True, help="a directory written by `cwm build` (or its official/)")
    score.add_argument("--env", required=True)
    model = score.add_mutually_exclusive_group(required=True)
    model.add_argument("--program", help="a Python file defining class Environment")
    model.add_argument("--true-env", action="store_true", help="the true environment as the model (the ceiling)")
    score.set_defaults(run=run_score)

    synthesize = actions.add_parser("synthesize", help="write models with GIF-MCTS, WorldCoder or plain sampling")
    synthesize.add_argument("--data", required=True, help="a directory written by `cwm build`")
    synthesize.add_argument("--env", required=True, help="comma-separated environment ids, searched together")
    synthesize.add_argument("--method", default="gif-mcts", help="gif-mcts (default), worldcoder or sample")
    synthesize.add_argument("--budget", type=int, default=10, metavar="B", help="LLM calls per environment "
                                                                                "(paper: 50 Llama 3, 10 GPT-4)")
    synthesize.add_argument("--llm", default="smollm2-135m",
                            help="smollm2-135m (default: the instruct model; the warm start only writes puzzles), "
                                 "a hub id or directory, or openai:BASE_URL#MODEL for an OpenAI-compatible server")
    synthesize.add_argument("--max-new-tokens", type=int, default=512, help="per completion (paper: 1500)")
    synthesize.add_argument("--temperature", type=float, default=1.0)
    synthesize.add_argument("--top-p", type=float, default=0.8)
    synthesize.add_argument("--top-k", type=int, default=100)
    add_device_option(synthesize)
    synthesize.add_argument("--seed", type=int, default=0)
    synthesize.add_argument("--out", required=True, help="directory for tasks/*.json, scores.json, summary.md")
    synthesize.set_defaults(run=run_synthesize)

    plan = actions.add_parser("plan", help="plan in the real environment with a model: normalised return R")
    plan.add_argument("--env", required=True)
    model = plan.add_mutually_exclusive_group(required=True)
    model.add_argument("--program", help="a Python file defining class Environment")
    model.add_argument("--true-env", action="store_true", help="the true environment's code as the model")
    plan.add_argument("--paper-scale", action="store_true",
                      help="the paper's planners (CEM: 1,000 samples x 100 steps x 20 iterations; full episodes); "
                           "default: the CPU settings of codeplay_lightning/cwm/plan.py")
    plan.add_argument("--episodes", type=int, help="episodes per policy (default 10)")
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument("--out", required=True, help="directory for planning.json")
    plan.set_defaults(run=run_plan)


def _sandbox():
    from codeplay_lightning.execution import Sandbox

    return Sandbox(workers=CWM_WORKERS, timeout=CWM_TIMEOUT, memory_mb=CWM_MEMORY_MB, modules=("numpy",))


def _env_ids(text: str | None) -> list[str]:
    from codeplay_lightning.cwm.envs import ENVS

    ids = [item.strip() for item in text.split(",") if item.strip()] if text else list(ENVS)
    unknown = [env_id for env_id in ids if env_id not in ENVS]
    if unknown:
        raise ValueError(f"unknown environment {unknown[0]!r}; CWMB has {', '.join(ENVS)}")
    return ids


def _data(directory: str, env_id: str):
    from codeplay_lightning.cwm.transitions import Transitions

    (env_id,) = _env_ids(env_id)
    path = Path(directory) / f"{env_id}.npz"
    if not path.is_file():
        raise ValueError(f"{path} does not exist: run `codeplay cwm build --out {directory}` first")
    return Transitions.load(path)


def _program(path: str) -> str:
    text = Path(path).read_text()
    if "class Environment" not in text:
        raise ValueError(f"{path} defines no class Environment")
    return text


def run_build(args: argparse.Namespace) -> int:
    from codeplay_lightning.cwm.collect import build
    from codeplay_lightning.cwm.official import read_official_buffer

    out, env_ids = Path(args.out), _env_ids(args.envs)
    official = {env_id: Path(args.official) / env_id / "train_buffer.pkl"
                for env_id in env_ids} if args.official else {}
    if official and not any(path.is_file() for path in official.values()):
        raise ValueError(f"{args.official} holds no <env id>/train_buffer.pkl")
    rows = build(out, env_ids, seed=args.seed)
    for env_id, pickle_path in official.items():
        if pickle_path.is_file():  # the official data lacks some environments (Humanoid's buffers are empty)
            (out / "official").mkdir(parents=True, exist_ok=True)
            read_official_buffer(pickle_path, env_id).save(out / "official" / f"{env_id}.npz")
        else:
            print(f"  no official buffer for {env_id} in {args.official}")
    (out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    for row in rows:
        print("  " + "  ".join(f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}"
                               for key, value in row.items()))
    print(f"transitions written to {out}")
    return 0


def run_score(args: argparse.Namespace) -> int:
    from codeplay_lightning.cwm import metric
    from codeplay_lightning.cwm.oracle import true_predictions
    from codeplay_lightning.cwm.task import score_model

    data = _data(args.data, args.env)
    if args.true_env:
        result = {}
        for split in ("search", "heldout"):
            part = data.of_split(split)
            if len(part):
                predictions = true_predictions(part)
                result[split] = {"accuracy": metric.accuracy(part, predictions),
                                 "official_accuracy": metric.official_accuracy(part, predictions)}
    else:
        with _sandbox() as sandbox:
            score = score_model(sandbox, _program(args.program), data)
        result = {"search": {"accuracy": score.accuracy, "official_accuracy": score.official_accuracy},
                  "heldout": {"accuracy": score.heldout_accuracy},
                  "bug": None if score.bug is None else f"{score.bug.kind}: {score.bug.detail}"}
    print(json.dumps({"env": args.env, **result}, indent=1))
    return 0


def run_synthesize(args: argparse.Namespace) -> int:
    import torch

    from codeplay_lightning.cwm.envs import description
    from codeplay_lightning.cwm.task import CWMTask, score_model
    from codeplay_lightning.llm import load_llm
    from codeplay_lightning.models import SamplingConfig
    from codeplay_lightning.search.synthesis import SynthesisConfig, synthesize

    config = SynthesisConfig(args.method, args.budget, args.seed)
    sampling = SamplingConfig(args.max_new_tokens, args.temperature, args.top_p, top_k=args.top_k)
    out, env_ids = Path(args.out), _env_ids(args.env)
    data = {env_id: _data(args.data, env_id) for env_id in env_ids}
    with _sandbox() as sandbox:
        tasks = {env_id: CWMTask(env_id, description(env_id), data[env_id], sandbox) for env_id in env_ids}
        llm = load_llm(args.llm, sampling, dtype=_dtype(args.device), device=args.device,
                       generator=torch.Generator().manual_seed(args.seed))
        arguments = {key: value for key, value in vars(args).items() if key not in ("command", "cwm_command", "run")}
        summary = synthesize(tasks, llm, config, out, llm_spec=args.llm, arguments=arguments)
        scores = {}
        for outcome in summary.outcomes:  # the held-out and official numbers no search decision saw
            program = json.loads((out / outcome.file).read_text())["program"]
            score = score_model(sandbox, program, data[outcome.name])
            scores[outcome.name] = {"accuracy": score.accuracy, "heldout_accuracy": score.heldout_accuracy,
                                    "official_accuracy": score.official_accuracy, "calls": outcome.calls,
                                    "bug": None if score.bug is None else score.bug.kind}
    (out / "scores.json").write_text(json.dumps(scores, indent=1) + "\n")
    for env_id, row in scores.items():
        print(f"  {env_id:<28} accuracy {row['accuracy']:.3f}  held-out {row['heldout_accuracy']:.3f}  "
              f"official {row['official_accuracy']:.3f}  calls {row['calls']}")
    print(f"results written to {out} (summary.md, scores.json, tasks/)")
    return 0


def _dtype(device: str) -> torch.dtype:
    """bfloat16 (it samples ~1.5x faster on CPUs with AMX), except on a GPU older than Ampere, which only
    emulates it: float32 there."""
    import torch

    native = device == "cpu" or torch.cuda.get_device_capability(device)[0] >= 8
    return torch.bfloat16 if native else torch.float32


def run_plan(args: argparse.Namespace) -> int:
    from dataclasses import asdict, replace

    from codeplay_lightning.cwm.plan import CPU, PAPER, evaluate_planning, model_policy, true_model_policy

    settings = PAPER if args.paper_scale else CPU
    if args.episodes is not None:
        if args.episodes < 1:
            raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
        settings = replace(settings, episodes=args.episodes)
    env_id = _env_ids(args.env)[0]
    started = time.perf_counter()
    with _sandbox() as sandbox:
        model = (true_model_policy(env_id, settings) if args.true_env
                 else model_policy(env_id, _program(args.program), sandbox, settings))
        result = evaluate_planning(env_id, model, settings, seed=args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = result.to_dict() | {"model": "true environment" if args.true_env else args.program,
                                 "settings": asdict(settings), "seconds": time.perf_counter() - started}
    (out / "planning.json").write_text(json.dumps(record, indent=1) + "\n")
    means = [sum(returns) / len(returns) for returns in (result.random_returns, result.true_returns,
                                                         result.model_returns)]
    print(f"  {env_id}: R = {result.normalised:.3f} ± {result.normalised_error:.3f}  (mean returns: random "
          f"{means[0]:.2f}, oracle {means[1]:.2f}, model {means[2]:.2f})")
    if result.model_bug:
        print(f"  the model failed: {result.model_bug[:300]}")
    print(f"written to {out / 'planning.json'}")
    return 0
