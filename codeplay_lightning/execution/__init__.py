"""Sandboxed verification of puzzle solutions: `Sandbox(...).verify([Program(f, g), ...]) -> [Verdict]`.

No torch import on this path: the CLI's `verify` starts in well under a second.
"""

from codeplay_lightning.execution.sandbox import Program, Sandbox, Verdict

__all__ = ["Program", "Sandbox", "Verdict"]
