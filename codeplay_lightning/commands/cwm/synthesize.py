"""`codeplay cwm synthesize`: models of CWMB environments written by a search, then scored on the held-out and
official transitions no search decision saw."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from codeplay_lightning.commands.args import (
    add_method_option,
    add_model_options,
    add_sampling_options,
    load_model,
    sampling,
)
from codeplay_lightning.commands.cwm.args import env_ids, sandbox, transitions
from codeplay_lightning.config import EMBEDDED_ALIAS

HELP = "write models with GIF-MCTS, WorldCoder or plain sampling"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="a directory written by `cwm build`")
    parser.add_argument("--env", required=True, help="comma-separated environment ids, searched together")
    add_method_option(parser)
    parser.add_argument(
        "--budget", type=int, default=10, metavar="B", help="LLM calls per environment (paper: 50 Llama 3, 10 GPT-4)"
    )
    add_model_options(parser, llm=EMBEDDED_ALIAS)
    add_sampling_options(parser)
    parser.add_argument("--out", required=True, help="directory for tasks.jsonl.gz, scores.json, summary.md")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.cwm.envs import description
    from codeplay_lightning.cwm.task import CWMTask, score_model
    from codeplay_lightning.search.synthesis import SynthesisConfig, synthesize, task_records

    config = SynthesisConfig(args.method, args.budget, args.seed)
    out, ids = Path(args.out), env_ids(args.env)
    data = {env_id: transitions(args.data, env_id) for env_id in ids}
    with sandbox() as box:
        tasks = {env_id: CWMTask(env_id, description(env_id), data[env_id], box) for env_id in ids}
        llm = load_model(args, sampling(args))
        arguments = {key: value for key, value in vars(args).items() if key not in ("command", "cwm_command")}
        summary = synthesize(tasks, llm, config, out, llm_spec=args.llm, arguments=arguments)
        scores, records = {}, task_records(out)
        for outcome in summary.outcomes:
            model = records[outcome.file]["program"]
            score = score_model(box, model, data[outcome.name])
            scores[outcome.name] = {
                "accuracy": score.accuracy,
                "heldout_accuracy": score.heldout_accuracy,
                "official_accuracy": score.official_accuracy,
                "calls": outcome.calls,
                "bug": None if score.bug is None else score.bug.kind,
            }
    (out / "scores.json").write_text(json.dumps(scores, indent=1) + "\n")
    for env_id, row in scores.items():
        print(
            f"  {env_id:<28} accuracy {row['accuracy']:.3f}  held-out {row['heldout_accuracy']:.3f}  "
            f"official {row['official_accuracy']:.3f}  calls {row['calls']}"
        )
    print(f"results written to {out} (summary.md, scores.json, tasks.jsonl.gz)")
    return 0
