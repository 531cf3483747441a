"""`codeplay train CONFIG.yaml... [key=value...] [--resume PATH|auto]`: every config error is reported before torch
and Lightning are imported.

SIGTERM (a scheduler's preemption, `docker stop`) stops the run at once and exits with status 143 (under `make`,
make's own 2 after its "Error 143"): the checkpoint of the last finished iteration stands (the iteration under way is
sampled again on resume, as after a crash; a checkpoint being written is finished first), and the command that resumes
exactly this run is printed, as the user ran it (`make train ...` or the codeplay command); stopped before its first
iteration finished, it says there is no checkpoint to resume."""

from __future__ import annotations

import argparse
import ast
import io
import logging
import os
import shlex
import signal
import sys
import textwrap
import tokenize
from dataclasses import fields, is_dataclass
from pathlib import Path

import yaml

from codeplay_lightning import config as config_module
from codeplay_lightning.allocator import keep_freed_memory_on_cpu
from codeplay_lightning.commands.output import quiet_libraries
from codeplay_lightning.config import TrainConfig, load_config, named_by_changes, resume_checkpoint, to_yaml

HELP = "train the Setter with PPO (Lightning)"
JEMALLOC = True  # its training runs under jemalloc where it is installed (allocator.py)
HELP_WIDTH = 118  # the keys' lines in --help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "items",
        nargs="+",
        metavar="CONFIG.yaml | key=value",
        help="config files merged in order over the schema's defaults (the CPU scale), then overrides",
    )
    parser.add_argument(
        "--resume",
        help="what to continue: a run folder (runs/<name>/version_N), a checkpoint, or 'auto' (this config's newest)",
    )
    parser.add_argument("--print-config", action="store_true", help="print the merged config as YAML and exit")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _keys_and_presets()


def run(args: argparse.Namespace) -> int:
    files = [item for item in args.items if "=" not in item]
    overrides = [item for item in args.items if "=" in item]
    config = named_by_changes(load_config(files, overrides), overrides)
    if args.print_config:
        print(to_yaml(config), end="")
        return 0
    if args.resume is not None:
        args.resume = str(resume_checkpoint(config, args.resume))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    keep_freed_memory_on_cpu(config.trainer.accelerator)  # under glibc, PPO updates a fifth faster on CPU

    from codeplay_lightning.devices import check_cpu_precision, check_devices

    check_devices(config.trainer)  # in one line, before Lightning and the models load
    check_cpu_precision(config.trainer)
    from codeplay_lightning.train import train

    quiet_libraries()
    signal.signal(signal.SIGTERM, _stop)
    earlier_runs = _run_folders(config)
    try:
        run_dir = train(config, resume=args.resume)
    except Stopped:
        started = _run_folders(config) - earlier_runs
        resumed = Path(args.resume).parents[1] if args.resume is not None else None
        print(_stopped(args.items, resumed, started), file=sys.stderr)
        return 128 + signal.SIGTERM
    from lightning.pytorch.utilities import rank_zero_only

    if rank_zero_only.rank == 0:  # under DDP every rank returns here: one says where the run is
        print(f"run directory: {run_dir}  (tensorboard --logdir {Path(config.trainer.run_root)})")
    return 0


def _run_folders(config: TrainConfig) -> set[Path]:
    return set(Path(config.trainer.run_root, config.name).glob("version_[0-9]*"))


def _stopped(items: list[str], resumed: Path | None, started: set[Path]) -> str:
    """The line a stopped run prints: the command that resumes it, naming its own run folder (the one it `resumed`,
    or the one it `started` when that holds a checkpoint), else that there is nothing to resume."""
    own = resumed or next((folder for folder in started if (folder / "checkpoints" / "last.ckpt").is_file()), None)
    if own is not None:
        return (
            f"stopped by SIGTERM: the last finished iteration's checkpoint stands; resume with: {_resume(items, own)}"
        )
    where = ", ".join(str(folder) for folder in sorted(started)) or "no run folder yet"
    return (
        f"stopped by SIGTERM before the first iteration finished ({where}): no checkpoint to resume; "
        "train again to start afresh"
    )


def _resume(items: list[str], run_folder: Path) -> str:
    """The command that continues `run_folder`, in the words the run was started with: `make train CONFIG=...` when
    make ran it (make passes MAKELEVEL down), else the codeplay command as it was typed."""
    files = [item for item in items if "=" not in item]
    preset = Path(files[0]) if len(files) == 1 else None
    if "MAKELEVEL" in os.environ and preset is not None and preset.parent == Path("configs"):
        overrides = [item for item in items if "=" in item]
        words = ["make", "train", f"CONFIG={preset.stem}", *([f"ARGS={' '.join(overrides)}"] if overrides else [])]
        return shlex.join([*words, f"RESUME={run_folder}"])
    # (`python -m codeplay_lightning.cli` puts the module's file in argv[0]: the line says it as typed)
    program = [sys.executable, "-m", __package__.split(".")[0] + ".cli"] if sys.argv[0].endswith(".py") else []
    return shlex.join([*(program or [sys.argv[0] or "codeplay"]), "train", *items, "--resume", str(run_folder)])


def _keys_and_presets() -> str:
    """Every key a config sets, by section, as `key (default): meaning` (the schema's comments), and the presets of
    ./configs (docs/training.md says what each does)."""
    comments = schema_comments(Path(config_module.__file__).read_text(encoding="utf-8"))
    defaults = TrainConfig()
    lines = ["keys, as key (default): meaning (docs/training.md says more):"]
    for section in fields(TrainConfig):
        if not is_dataclass(section.default_factory):  # a top-level key
            lines += _key_line(section.name, getattr(defaults, section.name), comments["TrainConfig"], "  ")
            continue
        lines.append(f"  {section.name}:")
        for key in fields(section.default_factory):
            default = getattr(getattr(defaults, section.name), key.name)
            lines += _key_line(key.name, default, comments[section.default_factory.__name__], "    ")
    presets = sorted(path.stem for path in Path("configs").glob("*.yaml"))
    lines.append(f"presets (configs/): {' '.join(presets)}" if presets else "presets: configs/*.yaml of a clone")
    return "\n".join(lines)


def _key_line(key: str, default: object, comments: dict[str, str], indent: str) -> list[str]:
    """`key (default): meaning`, wrapped under the key; the default as a `key=value` override writes it."""
    shown = yaml.safe_dump(default, default_flow_style=True).removesuffix("\n...\n").strip()
    line = f"{key} ({shown}): {comments[key]}"
    return textwrap.wrap(line, HELP_WIDTH, initial_indent=indent, subsequent_indent=indent + "    ")


def schema_comments(source: str) -> dict[str, dict[str, str]]:
    """The comment of each field of each class in `source` (config.py's text), by class and field name: the
    comment lines just above the field, then the comment at the end of its line, joined."""
    comments = {
        token.start[0]: token.string.removeprefix("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    lines = source.splitlines()
    own_line = {number for number in comments if lines[number - 1].lstrip().startswith("#")}
    by_class: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        by_class[node.name] = {}
        for statement in node.body:
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            above = statement.lineno - 1
            while above in own_line:
                above -= 1
            parts = [comments[number] for number in range(above + 1, statement.lineno)]
            if statement.end_lineno in comments and statement.end_lineno not in own_line:
                parts.append(comments[statement.end_lineno])
            by_class[node.name][statement.target.id] = " ".join(parts)
    return by_class


class Stopped(BaseException):
    """Raised by SIGTERM's handler wherever the run is; a BaseException, as KeyboardInterrupt, so that no handler of
    ordinary errors takes it for one."""


def _stop(signum, frame) -> None:
    raise Stopped
