"""Sandboxed execution of untrusted programs, one small API:

    Sandbox(...).verify([Program(f, g), ...]) -> [Verdict]   does f(g()) hold? (puzzle solutions)
    Sandbox(...).apply([Call(source, function, input), ...]) -> [Verdict with .value]   a program's results

No torch import on this path: the CLI's `verify` starts in well under a second.
"""

from codeplay_lightning.execution.api import JUDGE_ERROR, Call, IsolationError, Program, Verdict
from codeplay_lightning.execution.sandbox import Sandbox

__all__ = ["JUDGE_ERROR", "Call", "IsolationError", "Program", "Sandbox", "Verdict"]
