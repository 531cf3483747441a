"""`codeplay cwm build | score | synthesize | plan`: Code World Models, one module per action, each with `HELP`,
`add_arguments` and `run` as the commands have.

    codeplay cwm build --out DIR [--envs ID,...] [--seed S] [--official DIR]
    codeplay cwm score --data DIR --env ID (--program FILE | --true-env)
    codeplay cwm synthesize --data DIR --env ID[,ID...] [--method M] [--budget B] [--llm SPEC] --out DIR
    codeplay cwm plan --env ID (--program FILE | --true-env) [--paper-scale] [--episodes N] --out DIR
"""

from __future__ import annotations

import argparse

from codeplay_lightning.commands.cwm import build, plan, score, synthesize

HELP = "Code World Models: benchmark data, scoring, synthesis, planning"
ACTIONS = {"build": build, "score": score, "synthesize": synthesize, "plan": plan}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="cwm_command", required=True)
    for name, action in ACTIONS.items():
        action.add_arguments(actions.add_parser(name, help=action.HELP, description=action.HELP))


def run(args: argparse.Namespace) -> int:
    return ACTIONS[args.cwm_command].run(args)
