"""`codeplay sft SOURCE... --out DIR`: fine-tune a model on puzzles, in the prompts' few-shot format, and on
examples of the code search's actions (`codeplay actions`), in its prompts."""

from __future__ import annotations

import argparse
import json
import logging

from codeplay_lightning.allocator import keep_freed_memory_on_cpu
from codeplay_lightning.commands.args import existing_file
from codeplay_lightning.config import EMBEDDED_ALIAS

HELP = "supervised fine-tuning on puzzles in the prompts' few-shot format, and on the code search's actions"
JEMALLOC = True  # its training runs under jemalloc where it is installed (allocator.py)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sources",
        nargs="+",
        type=existing_file,
        metavar="SOURCE",
        help="our corpus JSON (its train split), P3's puzzles.json (with --p3-split), JSONL of {f, g}, or the "
        "JSONL of action examples that codeplay actions writes",
    )
    parser.add_argument("--model", default=EMBEDDED_ALIAS, help="hub id, local directory or smollm2-135m")
    parser.add_argument("--out", required=True, help="output directory: a model spec usable everywhere")
    parser.add_argument(
        "--p3-split", type=existing_file, help="P3's split.json: only its train classes of a P3 puzzles.json are used"
    )
    parser.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tune; > 0: LoRA on every linear layer")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=8, help="packed sequences per step")
    parser.add_argument("--block", type=int, default=512, help="tokens per packed sequence at most")
    parser.add_argument("--lr", type=float, default=0.0, help="peak learning rate (default: 1e-3 LoRA, 5e-5 full)")
    parser.add_argument(
        "--precision",
        default="auto",
        help="Lightning precision: bf16-mixed, 32-true, ..., or auto: bf16-mixed where the device computes "
        "bfloat16 natively (GPUs from Ampere, AMX CPUs), else 32-true (default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="continue OUT/checkpoints/last.ckpt")


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.sft import SFTConfig, fine_tune

    config = SFTConfig(
        lora_rank=args.lora_rank,
        steps=args.steps,
        batch_size=args.batch_size,
        block=args.block,
        lr=args.lr,
        precision=args.precision,
        seed=args.seed,
    )
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    keep_freed_memory_on_cpu("auto")  # the accelerator fine_tune asks Lightning for
    out = fine_tune(args.sources, args.model, args.out, config, p3_split=args.p3_split, resume=args.resume)
    record = json.loads((out / "sft.json").read_text())
    print(
        f"{record['steps']} steps in {record['seconds']:.0f} s, final loss {record['final_loss']:.3f}; "
        f"model written to {out} (use it as a model spec; tensorboard --logdir {out / 'logs'})"
    )
    return 0
