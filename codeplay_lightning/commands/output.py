"""What the commands print on the terminal: a progress bar on stderr, program text made safe to show, and the
libraries' own noise kept out."""

from __future__ import annotations

import logging
import warnings

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

console = Console(stderr=True)


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


def printable(text: str) -> str:
    """Text a program wrote, safe for a terminal: control characters (escape sequences among
    them) and lone surrogates shown as escapes, never interpreted."""
    return "".join(char if char.isprintable() or char == "\n" else repr(char)[1:-1] for char in text)


def quiet_libraries() -> None:
    """The console keeps a command's own lines (training's: `setter/progress.py`): the libraries' progress bars,
    notices and warnings about their own code are noise to someone training or exporting a Setter. Their warnings
    still reach a log at WARNING. Imports transformers."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # "Loading weights", "Writing model shards"
    for name in ("lightning.pytorch", "lightning.fabric", "sentence_transformers"):  # device notices, tips
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # peft's calls, deprecated
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")  # Lightning's own
