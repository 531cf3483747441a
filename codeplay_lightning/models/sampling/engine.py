"""The decoding loop of `sample` and `sample_streams`: what a sampler takes (`SamplingConfig`) and gives (`Samples`),
each prompt's tokens and log-probs as they come (`_Decoded`), the loop that refills or drops finished batch rows
(`_decode`), and the runs that keep the KV cache within its slots (`slot_limited_runs`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from codeplay_lightning.models.sampling.picking import _uniforms, pick_tokens


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int
    temperature: float = 1.0  # 0 means greedy; log-probs are then taken at temperature 1
    top_p: float = 1.0  # nucleus mass to sample from; 1.0 samples from the full distribution
    stop_strings: tuple[str, ...] = ()  # a row stops once its continuation contains one of these
    top_k: int = 0  # sample from the k most likely tokens only (then top_p within them); 0: no limit

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: no limit), got {self.top_k}")
        if any(stop == "" for stop in self.stop_strings):
            raise ValueError("stop_strings must not contain the empty string")


@dataclass(frozen=True)
class Samples:
    """One entry per prompt, in prompt order."""

    texts: list[str]  # continuation, cut before the first stop string (and without the eos token)
    token_ids: list[torch.Tensor]  # (n_i,) int64: generated ids, up to the one completing a stop or eos
    logprobs: list[torch.Tensor]  # (n_i,) float32: log_softmax(logits / T) at each generated id
    finished: list[bool]  # True: stop string or eos reached; False: ran out of max_new_tokens
    prompt_lengths: list[int]  # tokens of the prompt each continuation followed


def slot_limited_runs(
    own_lengths: list[int], rows: int, max_new_tokens: int, max_slots: int | None
) -> list[tuple[list[int], int]]:
    """The prompts (by index, in order) in at most two runs, each with its rows: those whose
    own length + `max_new_tokens` fit `max_slots` // `rows` slots a row run in `rows` rows; the longer
    ones after them, in as many rows as `max_slots` holds at their longest (at least one)."""
    n_prompts = len(own_lengths)
    if max_slots is None:
        return [(list(range(n_prompts)), min(rows, n_prompts))]
    per_row = max_slots // rows
    short = [i for i in range(n_prompts) if own_lengths[i] + max_new_tokens <= per_row]
    long = [i for i in range(n_prompts) if own_lengths[i] + max_new_tokens > per_row]
    runs = [(short, min(rows, len(short)))] if short else []
    if long:
        longest = max(own_lengths[i] for i in long) + max_new_tokens
        runs.append((long, min(len(long), max(1, max_slots // longest))))
    return runs


class _Decoded:
    """Each prompt's sampled tokens and log-probs as they come, and the sampling step every context shares."""

    def __init__(self, tokenizer, config: SamplingConfig, generators, prompt_lengths: list[int]) -> None:
        self.tokenizer, self.config, self.generators = tokenizer, config, generators
        self.prompt_lengths = prompt_lengths
        n_prompts = len(prompt_lengths)
        self.ids: list[list[int]] = [[] for _ in range(n_prompts)]
        self.logprobs: list[list[float]] = [[] for _ in range(n_prompts)]
        self.finished = [False] * n_prompts

    def step(self, logits: torch.Tensor, rows: list[int]) -> tuple[torch.Tensor, list[bool]]:
        """Sample the next token of each prompt in `rows` from `logits` (B, V); returns the tokens (B,) and,
        per row, whether its continuation is done (a stop, eos, or max_new_tokens)."""
        config = self.config
        row_generators = [self.generators[i] for i in rows] if self.generators is not None else None
        tokens, token_logprobs = pick_tokens(
            logits, config.temperature, config.top_p, _uniforms(row_generators, len(rows), logits.device), config.top_k
        )
        for i, token, logprob in zip(rows, tokens.tolist(), token_logprobs.tolist()):
            self.ids[i].append(token)
            self.logprobs[i].append(logprob)
        stopped = _finished(self.tokenizer, [self.ids[i] for i in rows], config.stop_strings)
        for i, done in zip(rows, stopped):
            self.finished[i] = done
        return tokens, [done or len(self.ids[i]) == config.max_new_tokens for i, done in zip(rows, stopped)]

    def samples(self) -> Samples:
        continuations = list(zip(self.ids, self.logprobs, self.finished))
        return _samples(self.tokenizer, continuations, self.prompt_lengths, self.config.stop_strings)


def _decode(decoded: _Decoded, queue: deque[int], n_rows: int, new_context) -> None:
    """Sample every prompt in `queue` (indices) in batches of at most `n_rows` rows. `new_context(rows)` starts the
    prompts `rows`, one per batch row; a context that `refills` takes the next prompt into a finished row at
    once, another is dropped down to its running rows and the next batch starts when it has none."""
    while queue:
        rows = [queue.popleft() for _ in range(min(n_rows, len(queue)))]  # rows[b]: the prompt batch row b runs
        context = new_context(rows)
        while True:
            tokens, done = decoded.step(context.logits, rows)
            freed = [b for b in range(len(rows)) if done[b]]
            refilled = freed[: len(queue)] if context.refills else []
            running = [b for b in range(len(rows)) if not done[b]]
            kept = sorted(running + refilled)
            if not kept:
                break
            if len(kept) < len(rows):  # drop the rows no prompt is left for, from the batch and the cache
                index = torch.tensor(kept, device=tokens.device)
                context.keep(index)
                tokens, rows = tokens[index], [rows[b] for b in kept]
                refilled = [kept.index(b) for b in refilled]
            if running:
                context.advance(tokens)
            if refilled:
                new_rows = [queue.popleft() for _ in refilled]
                for b, i in zip(refilled, new_rows):
                    rows[b] = i
                context.fill(refilled, new_rows)


def _samples(
    tokenizer: PreTrainedTokenizerBase,
    continuations: list[tuple[list[int], list[float], bool]],
    prompt_lengths: list[int],
    stop_strings: tuple[str, ...],
) -> Samples:
    """`Samples` from (token ids, log-probs, finished) and its prompt's length per continuation."""
    return Samples(
        texts=[_continuation_text(tokenizer, ids, stop_strings) for ids, _, _ in continuations],
        token_ids=[torch.tensor(ids, dtype=torch.long) for ids, _, _ in continuations],
        logprobs=[torch.tensor(lps, dtype=torch.float32) for _, lps, _ in continuations],
        finished=[finished for _, _, finished in continuations],
        prompt_lengths=prompt_lengths,
    )


def _finished(
    tokenizer: PreTrainedTokenizerBase, continuations: list[list[int]], stop_strings: tuple[str, ...]
) -> list[bool]:
    """Per continuation (token ids): does it contain a stop string or end in the eos token?"""
    texts = tokenizer.batch_decode(continuations)
    return [
        bool(ids) and (ids[-1] == tokenizer.eos_token_id or any(stop in text for stop in stop_strings))
        for ids, text in zip(continuations, texts)
    ]


def _continuation_text(tokenizer: PreTrainedTokenizerBase, ids: list[int], stop_strings: tuple[str, ...]) -> str:
    """Decoded `ids` without a final eos token, cut before the earliest stop string."""
    if ids and ids[-1] == tokenizer.eos_token_id:
        ids = ids[:-1]
    text = tokenizer.decode(ids)
    cut = min((text.find(stop) for stop in stop_strings if stop in text), default=len(text))
    return text[:cut]
