"""The options several commands share, each with one default: the sandbox's (training's `sandbox:` defaults), a
search's sampling, and the local model's. Bad values are one-line argparse errors, before anything loads; torch
is imported only when a command that loads a model parses its `--device`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from codeplay_lightning.config import SandboxConfig
from codeplay_lightning.execution.api import checked_timeout, checked_workers, usable_cores
from codeplay_lightning.search.driver import METHODS

if TYPE_CHECKING:
    import torch

    from codeplay_lightning.execution import Sandbox
    from codeplay_lightning.llm import HFLLM, OpenAILLM
    from codeplay_lightning.models import SamplingConfig


def add_workers_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=workers,
        default=SandboxConfig.workers,
        help="sandbox wardens: programs judged at once, or auto: one per usable core (default: auto)",
    )


def add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    """For the commands that judge programs someone else wrote: a file's, or an LLM's."""
    add_workers_option(parser)
    parser.add_argument(
        "--timeout",
        type=timeout,
        default=SandboxConfig.timeout,
        help="seconds per program (default: %(default)s, as P3's judge)",
    )
    parser.add_argument(
        "--require-isolation",
        action="store_true",
        help="refuse to run programs with less than full isolation (root: namespaces, cgroup, seccomp)",
    )


def sandbox(args: argparse.Namespace) -> Sandbox:
    from codeplay_lightning.execution import Sandbox

    return Sandbox(workers=args.workers, timeout=args.timeout, require_isolation=args.require_isolation)


def add_method_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="gif-mcts",
        metavar="METHOD",
        help="gif-mcts (default), worldcoder, sample (B independent samples), or an ablation without one action: "
        "gif-mcts-no-generate, gif-mcts-no-improve, gif-mcts-no-fix",
    )


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    """How a search's LLM samples: paper table 5, with a length cap for CPUs."""
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=512,
        help="per completion, prose and program (default: %(default)s; paper: 1500, on GPUs)",
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="default: %(default)s, as the paper")
    parser.add_argument("--top-p", type=float, default=0.8, help="default: %(default)s, as the paper")
    parser.add_argument("--top-k", type=int, default=100, help="0: no limit (default: %(default)s, as the paper)")


def sampling(args: argparse.Namespace) -> SamplingConfig:
    from codeplay_lightning.models import SamplingConfig

    return SamplingConfig(args.max_new_tokens, args.temperature, args.top_p, top_k=args.top_k)


def add_model_options(parser: argparse.ArgumentParser, llm: str) -> None:
    """`--llm`, defaulting to `llm` (the model a command is about), and where and how a local one runs."""
    parser.add_argument(
        "--llm",
        default=llm,
        help="smollm2-135m, smollm2-135m-sft (with the warm-start adapter), a hub id, a local "
        "directory, or openai:BASE_URL#MODEL for an OpenAI-compatible server "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="weights of a local model; auto (default): bfloat16 where the device computes it natively "
        "(CPUs with AMX or AVX512-BF16, GPUs of compute capability 8 or more), else float32 (emulated bfloat16 "
        "is slower)",
    )
    parser.add_argument(
        "--device",
        type=device,
        default="auto",
        help="where a local model runs: auto (default: cuda when available, else cpu), cpu, cuda, cuda:N",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the LLM's sampling (and a search's own choices)")


def load_model(args: argparse.Namespace, sampling: SamplingConfig, **options) -> HFLLM | OpenAILLM:
    """The `--llm` model, sampling as `sampling` says and seeded by `--seed`; a local one in `--dtype` on
    `--device`. `options` go to `load_llm` (chat, batch_size)."""
    import torch

    from codeplay_lightning.llm import load_llm

    return load_llm(
        args.llm,
        sampling,
        dtype=model_dtype(args.dtype, args.device),
        device=args.device,
        generator=torch.Generator().manual_seed(args.seed),
        **options,
    )


def model_dtype(name: str, device: str) -> torch.dtype:
    """`name`'s dtype; `auto` is bfloat16 where the device computes it natively, else float32."""
    import torch

    from codeplay_lightning.devices import native_bf16

    if name != "auto":
        return getattr(torch, name)
    return torch.bfloat16 if native_bf16(device) else torch.float32


def device(text: str) -> str:
    """`text` as a device a model can be moved to; `auto` is `cuda` when there is one, else `cpu`."""
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


def existing_file(text: str) -> str:
    """`text` as the path of a file that exists: a missing input is refused before anything loads."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(
            f"{text!r} does not exist" if not Path(text).exists() else f"{text!r} is not a file"
        )
    return text


def workers(text: str) -> int:
    return usable_cores() if text == "auto" else _checked(checked_workers, int, text)


def timeout(text: str) -> float:
    return _checked(checked_timeout, float, text)


def _checked(check: Callable[[object], int | float], kind: type[int | float], text: str) -> int | float:
    """`check(kind(text))`, the sandbox's own rule; a text that is no `kind` at all goes to `check` as it is, to
    be refused in its words."""
    try:
        value = kind(text)
    except ValueError:
        value = text
    try:
        return check(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
