"""The LLM interface the search uses: batched text completion plus usage counters.

Sampling settings (temperature, top-p, max new tokens; paper table 5) belong to the implementation.
The real backends are in `backends.py`; `ScriptedLLM` stands in for them in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
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
    """For tests: returns scripted completions in order (raising when the script runs out), or, given a
    function, answers each prompt by it. Records every prompt and the size of every batch. Tokens are
    counted as whitespace-separated words (there is no tokenizer here)."""

    def __init__(self, script: Iterable[str] | Callable[[str], str]):
        self.answer = script if callable(script) else None
        self.script: list[str] = [] if callable(script) else list(script)
        self.prompts: list[str] = []
        self.batches: list[int] = []
        self.usage = LLMUsage()

    def complete(self, prompts: list[str]) -> list[str]:
        started = time.perf_counter()
        if self.answer is not None:
            self.script += [self.answer(prompt) for prompt in prompts]
        if len(self.prompts) + len(prompts) > len(self.script):
            raise RuntimeError(f"ScriptedLLM: script of {len(self.script)} completions exhausted")
        completions = self.script[len(self.prompts):len(self.prompts) + len(prompts)]
        self.prompts.extend(prompts)
        self.batches.append(len(prompts))
        self.usage.calls += len(prompts)
        self.usage.prompt_tokens += sum(len(prompt.split()) for prompt in prompts)
        self.usage.completion_tokens += sum(len(completion.split()) for completion in completions)
        self.usage.seconds += time.perf_counter() - started
        return completions
