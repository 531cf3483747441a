"""`--device`, shared by the commands that load a local model (`evaluate`, `synthesize`, `cwm synthesize`).

torch is imported only when such a command parses its arguments, so the other commands start fast.
"""

from __future__ import annotations

import argparse


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=device, default="auto",
                        help="where a local model runs: auto (default: cuda when available, else cpu), cpu, cuda, "
                             "cuda:N")


def device(text: str) -> str:
    """`text` as a device a model can be moved to; `auto` is `cuda` when there is one, else `cpu`. argparse
    turns the errors into one line, before any model loads."""
    import torch

    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, colon, index = text.partition(":")
    if not (text == "cpu" or kind == "cuda" and (not colon or index.isdigit())):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: auto, cpu, cuda or cuda:N")
    if kind == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: CUDA is not available (torch {torch.__version__})")
    if index and int(index) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: there are {torch.cuda.device_count()} CUDA devices")
    return text
