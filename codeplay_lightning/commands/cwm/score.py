"""`codeplay cwm score`: a model file's accuracy on an environment's transitions, or the true environment's."""

from __future__ import annotations

import argparse
import json

from codeplay_lightning.commands.cwm.args import program, sandbox, transitions

HELP = "a model's accuracy: ours (search and held-out) and the official one"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="a directory written by `cwm build` (or its official/)")
    parser.add_argument("--env", required=True)
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--program", help="a Python file defining class Environment")
    model.add_argument("--true-env", action="store_true", help="the true environment as the model (the ceiling)")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.cwm import metric
    from codeplay_lightning.cwm.oracle import true_predictions
    from codeplay_lightning.cwm.task import score_model

    data = transitions(args.data, args.env)
    if args.true_env:
        result = {}
        for split in ("search", "heldout"):
            part = data.of_split(split)
            if len(part):
                predictions = true_predictions(part)
                result[split] = {
                    "accuracy": metric.accuracy(part, predictions),
                    "official_accuracy": metric.official_accuracy(part, predictions),
                }
    else:
        with sandbox() as box:
            score = score_model(box, program(args.program), data)
        result = {
            "search": {"accuracy": score.accuracy, "official_accuracy": score.official_accuracy},
            "heldout": {"accuracy": score.heldout_accuracy},
            "bug": None if score.bug is None else f"{score.bug.kind}: {score.bug.detail}",
        }
    print(json.dumps({"env": args.env, **result}, indent=1))
    return 0
