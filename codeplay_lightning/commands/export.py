"""`codeplay export CHECKPOINT --out DIR`: a trained Setter as a Hugging Face model directory (LoRA merged) that
carries its prompt (`prompt.txt`), its stop (`generation_config.json`), a model card (`README.md`) and the run's
config (`codeplay.yaml`). Missing or taken paths are refused before torch is imported."""

from __future__ import annotations

import argparse
from pathlib import Path

from codeplay_lightning.commands.output import quiet_libraries

HELP = (
    "write a training checkpoint's Setter as a Hugging Face model directory (LoRA merged) with its prompt, stop and "
    "model card, for --llm and transformers"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        type=Path,
        help="a checkpoint (runs/NAME/version_N/checkpoints/last.ckpt) or the run directory holding it",
    )
    parser.add_argument("--out", type=Path, required=True, help="the model directory to write (must not exist)")


def run(args: argparse.Namespace) -> int:
    checkpoint = args.checkpoint / "checkpoints" / "last.ckpt" if args.checkpoint.is_dir() else args.checkpoint
    if not checkpoint.is_file():
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    if args.out.exists():
        raise FileExistsError(f"{args.out} exists: give a new directory")
    from codeplay_lightning.setter.export import export_policy

    quiet_libraries()
    out = export_policy(checkpoint, args.out)
    print(
        f"policy of {checkpoint} written to {out}: {out / 'README.md'} says how to prompt it (use it as --llm {out}, "
        "or with transformers' from_pretrained)"
    )
    return 0
