"""What the commands print on the terminal: a progress bar on stderr, and program text made safe to show."""

from __future__ import annotations

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
