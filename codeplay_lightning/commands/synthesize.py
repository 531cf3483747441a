"""`codeplay synthesize --task p3|apps PATH`: a program for every task by GIF-MCTS or a baseline, all tasks searched
at once."""

from __future__ import annotations

import argparse
from pathlib import Path

from codeplay_lightning.commands.args import (
    add_method_option,
    add_model_options,
    add_sampling_options,
    add_sandbox_options,
    load_model,
    sampling,
    sandbox,
)
from codeplay_lightning.commands.output import progress
from codeplay_lightning.config import EMBEDDED_ALIAS

HELP = "write programs for P3 puzzles or APPS problems with GIF-MCTS or a baseline, searching every task at once"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task",
        nargs=2,
        required=True,
        metavar=("p3|apps", "PATH"),
        help="p3 with a puzzle file (as for evaluate --puzzles) or 'bundled' (the bundled puzzles); "
        "apps with an APPS problem directory or a directory of them",
    )
    add_method_option(parser)
    parser.add_argument("--budget", type=int, default=50, metavar="B", help="LLM calls per task (paper: 50)")
    add_model_options(parser, llm=EMBEDDED_ALIAS)
    parser.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        help="send prompts as chat messages (default: on for a server, and for a local model "
        "whose tokenizer has a chat template)",
    )
    add_sampling_options(parser)
    add_sandbox_options(parser)
    parser.add_argument(
        "--split", help="p3: only the puzzles of this split (our corpus: train, heldout_instances, heldout_families)"
    )
    parser.add_argument("--p3-split", metavar="SPLIT_JSON", help="P3's split.json: --split train or test picks classes")
    parser.add_argument(
        "--first-of-class", action="store_true", help="p3: only the first instance of each P3 class or corpus family"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    parser.add_argument(
        "--out", help="directory for tasks.jsonl.gz, summary.json and summary.md (default: synthesis/<method>)"
    )


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.search.synthesis import SynthesisConfig, load_tasks, synthesize

    config = SynthesisConfig(args.method, args.budget, args.seed)
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    kind, path = args.task
    out = Path(args.out or f"synthesis/{args.method}")
    with sandbox(args) as box:
        chosen = load_tasks(kind, path, box, args.split, args.p3_split, args.first_of_class)
        tasks = dict(list(chosen.items())[: args.limit])
        llm = load_model(args, sampling(args), chat=args.chat)
        arguments = {key: value for key, value in vars(args).items() if key != "command"}
        with progress() as bar:
            task = bar.add_task("synthesizing", total=len(tasks))

            def show(finished: int, total: int, calls: int) -> None:
                bar.update(task, completed=finished, description=f"synthesizing ({calls} LLM calls)")

            summary = synthesize(
                tasks,
                llm,
                config,
                out,
                llm_spec=args.llm,
                arguments=arguments | {"chat": llm.chat, "out": str(out)},
                on_progress=show,
            )
    for label, value in summary.rows():
        print(f"  {label:<18} {value}")
    print(f"results written to {out} (summary.md, summary.json, tasks.jsonl.gz)")
    return 0
