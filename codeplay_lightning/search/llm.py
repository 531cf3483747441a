"""The LLM interface the search uses: batched text completion plus usage counters.

Sampling settings (temperature, top-p, max new tokens; paper table 5) belong to the implementation.
Only `ScriptedLLM`, for tests, lives here; real backends come later.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
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


class ScriptedLLM:
    """Returns scripted completions in order and records every prompt; raises when the script runs out.
    Tokens are counted as whitespace-separated words (there is no tokenizer here)."""

    def __init__(self, script: Iterable[str]):
        self.script: list[str] = list(script)
        self.prompts: list[str] = []
        self.usage = LLMUsage()

    def complete(self, prompts: list[str]) -> list[str]:
        started = time.perf_counter()
        if len(self.prompts) + len(prompts) > len(self.script):
            raise RuntimeError(f"ScriptedLLM: script of {len(self.script)} completions exhausted")
        completions = self.script[len(self.prompts):len(self.prompts) + len(prompts)]
        self.prompts.extend(prompts)
        self.usage.calls += len(prompts)
        self.usage.prompt_tokens += sum(len(prompt.split()) for prompt in prompts)
        self.usage.completion_tokens += sum(len(completion.split()) for completion in completions)
        self.usage.seconds += time.perf_counter() - started
        return completions
