"""What a caller hands the sandbox and gets back (`Program`, `Call`, `Verdict`, `IsolationError`), and the rules for
its settings (`checked_workers`, `checked_timeout`, `usable_cores` for `workers: auto`): the API of
`codeplay_lightning.execution`, which configs and commands check against before any warden starts."""

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeplay_lightning.execution.warden.protocol import JUDGE_ERROR

MAX_TIMEOUT = 86_400.0
OWN_CGROUP, CGROUPS = Path("/proc/self/cgroup"), Path("/sys/fs/cgroup")  # (v2)


def checked_workers(workers: object) -> int:
    """`workers` if it is a valid number of wardens (the one rule for the API, configs and the commands)."""
    if type(workers) is not int or not 1 <= workers <= 256:
        raise ValueError(f"workers must be a whole number from 1 to 256, got {workers!r}")
    return workers


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, less where its cgroup's CPU quota (a container's
    `--cpus`) allows fewer."""
    cores = len(os.sched_getaffinity(0))
    try:
        (group,) = [line[3:] for line in OWN_CGROUP.read_text().splitlines() if line[:3] == "0::"]
        quota, period = (CGROUPS / group.lstrip("/") / "cpu.max").read_text().split()
    except (OSError, ValueError):  # no cgroup v2, or no CPU controller in it
        return cores
    return cores if quota == "max" else max(1, min(cores, math.ceil(int(quota) / int(period))))


def checked_timeout(seconds: object) -> float:
    """`seconds` as a float if it is a valid timeout per program."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_TIMEOUT:
        raise ValueError(f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}, got {seconds!r}")
    return float(seconds)  # (nan fails the comparison above)


class IsolationError(ValueError):
    """A sandbox asked for full isolation (`require_isolation`) on a machine that offers less, said in one line."""


@dataclass(frozen=True)
class Program:
    """One candidate solution: `f(g()) is True` with an answer of type `ans_type` is a pass.
    `ans_type=None` means f's first annotation; with no annotation either, any JSON answer."""

    f: str
    g: str
    ans_type: str | None = None
    name: str = ""


@dataclass(frozen=True)
class Call:
    """`function(input)` in a fresh process of its own that first runs the program's source, for a
    result that is data rather than a verdict: nothing persists from one call to the next. `input`
    and the result are JSON data (each at most ANSWER_BYTES bytes as ASCII JSON text)."""

    source: str
    function: str
    input: Any


@dataclass(frozen=True)
class Verdict:
    status: str  # one of VERDICT_STATUSES for a Program, of CALL_STATUSES for a Call, or JUDGE_ERROR for either
    detail: str  # why, for anything but a pass: exception and short traceback, f's return value, ...
    seconds: float
    output: str = ""  # what g and then f printed, capped
    answer: str = ""  # repr of g's answer (shortened), when g gave one
    returned: str = ""  # repr of what f returned for it, when f returned
    value: Any = None  # what a Call's function returned

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def judge_fault(self) -> bool:
        """The sandbox failed to judge it (JUDGE_ERROR): says nothing of the program."""
        return self.status == JUDGE_ERROR
