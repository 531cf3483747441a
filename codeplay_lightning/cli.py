"""`codeplay`: train a puzzle Setter with PPO, and the tools around it: puzzles, models, search, experiments.

Train the Setter, build and verify puzzles, fine-tune and evaluate models, synthesize programs with GIF-MCTS,
compare and sweep experiments, and Code World Models (`codeplay cwm`).

Each command is a module of `codeplay_lightning/commands/` (`HELP`, `add_arguments`, `run`; `JEMALLOC = True` where
it trains), named in `COMMANDS`. They import torch, transformers and Lightning only when they run, so `codeplay verify`
starts fast.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from types import ModuleType
from typing import NoReturn

from codeplay_lightning.allocator import relaunch_under_jemalloc
from codeplay_lightning.commands import (
    actions,
    compare,
    corpus,
    cwm,
    env,
    evaluate,
    export,
    sft,
    sweep,
    synthesis_table,
    synthesize,
    train,
    verify,
)
from codeplay_lightning.commands.output import printable

COMMANDS: dict[str, ModuleType] = {
    "train": train,
    "export": export,
    "verify": verify,
    "corpus": corpus,
    "actions": actions,
    "sft": sft,
    "evaluate": evaluate,
    "synthesize": synthesize,
    "synthesis-table": synthesis_table,
    "compare": compare,
    "sweep": sweep,
    "cwm": cwm,
    "env": env,
}


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes in one line, which names the help to read (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    root = OneLineParser(prog="codeplay", description=__doc__.splitlines()[0])
    root.add_argument("--version", action="version", version=f"%(prog)s {version('codeplay_lightning')}")
    commands = root.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.add_arguments(commands.add_parser(name, help=command.HELP, description=command.HELP))
    return root


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (ValueError, OSError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        print(f"error: {printable(lines[0])}", file=sys.stderr)
        return 2


def entry() -> None:
    """The `codeplay` command line. Only a whole process can be relaunched: `main(argv)` in-process never is."""
    if len(sys.argv) > 1 and getattr(COMMANDS.get(sys.argv[1]), "JEMALLOC", False):  # a command module's flag
        relaunch_under_jemalloc()
    sys.exit(main())


if __name__ == "__main__":
    entry()
