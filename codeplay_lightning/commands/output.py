"""What the commands print on the terminal: a progress bar on stderr, program text made safe to show, and the
libraries' own noise kept out."""

from __future__ import annotations

import logging
import time
import warnings

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

console = Console(stderr=True)


HEARTBEAT_SECONDS = 60.0  # at most this long without a line, where the output is no terminal


class LineProgress(Progress):
    """Rich's bar in a terminal; written to a file or a pipe (a log, a batch job), where a bar shows nothing, a line
    per task as it changes phase, ends, or every HEARTBEAT_SECONDS: `description: done/total`."""

    def __init__(self, *columns, console: Console, **settings):
        super().__init__(*columns, console=console, disable=not console.is_terminal, **settings)
        self.lines: dict = {}  # task id: (the time of its last line, its description then)

    def update(self, task_id, **changes) -> None:
        super().update(task_id, **changes)
        if self.console.is_terminal:
            return
        task, now = next(task for task in self.tasks if task.id == task_id), time.monotonic()
        last, said = self.lines.get(task_id, (None, None))
        if last is None or said != task.description or task.finished or now - last >= HEARTBEAT_SECONDS:
            self.lines[task_id] = now, task.description
            counted = "" if task.total is None else f": {task.completed:g}/{task.total:g}"
            self.console.print(f"{task.description}{counted}", highlight=False, markup=False)

    def add_task(self, description: str, **settings):
        task_id = super().add_task(description, **settings)
        self.update(task_id)  # its first line
        return task_id


def progress() -> Progress:
    return LineProgress(
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
