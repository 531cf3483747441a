"""`codeplay train CONFIG.yaml... [key=value...] [--resume PATH|auto]`: every config error is reported before torch
and Lightning are imported."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from codeplay_lightning.allocator import keep_freed_memory_on_cpu
from codeplay_lightning.config import load_config

HELP = "train the Setter with PPO (Lightning)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "items",
        nargs="+",
        metavar="CONFIG.yaml | key=value",
        help="config files merged in order over the schema's defaults (the CPU scale), then overrides",
    )
    parser.add_argument("--resume", help="a checkpoint to continue from, or 'auto': this config's newest last.ckpt")


def run(args: argparse.Namespace) -> int:
    files = [item for item in args.items if "=" not in item]
    overrides = [item for item in args.items if "=" in item]
    config = load_config(files, overrides)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    keep_freed_memory_on_cpu(config.trainer.accelerator)  # under glibc, PPO updates a fifth faster on CPU

    from codeplay_lightning.train import train

    run_dir = train(config, resume=args.resume)
    print(f"run directory: {run_dir}  (tensorboard --logdir {Path(config.trainer.run_root)})")
    return 0
