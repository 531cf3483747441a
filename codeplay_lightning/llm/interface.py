"""The LLM interface the search uses: batched text completion plus usage counters.

Sampling settings (temperature, top-p, max new tokens; paper table 5) belong to the implementation.
The real backends are in `backends.py`; tests script an LLM of their own (`tests/support.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class LLMUsage:
    """What an LLM has spent so far. `calls` counts completions (one per prompt), the budget unit."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


class LLM(Protocol):
    usage: LLMUsage

    def complete(self, prompts: list[str]) -> list[str]:
        """One completion per prompt, in order."""
        ...
