"""Batched sampling with a KV cache, returning the log-probs PPO needs: the two samplers, what they take and give.

`sample` runs its prompts through a fixed number of batch rows: a prefill of each prompt's own tokens,
then one forward per new token on every row. A row stops when its decoded continuation contains a stop
string or it samples the eos token; on the fast path its slots take the next prompt at once
(continuous batching), so the batch stays full until the prompts run out. The token prefix common to
all prompts is held once (`shared_prefix`); the KV cache holds each row's own tokens. `sample_streams`
runs one prompt as streams that restart in place.

The package, one job a module:
    __init__     the API: `sample`, `sample_streams`, `token_consistent_prompt`; `SamplingConfig` and `Samples`
    engine.py    the decoding loop: each prompt's tokens as they come, rows refilled or dropped, runs within slots
    contexts.py  the KV-cache contexts the loop steps: the slot ring (`sample`'s fast path), the streams behind
                 the shared prefix (`sample_streams`' fast path), the whole context (the plain path of both)
    picking.py   one token per row: temperature, top-k and top-p, drawn by inverse CDF from each row's generator
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from codeplay_lightning.models.architectures import attention_paths
from codeplay_lightning.models.packed import with_packed_linears
from codeplay_lightning.models.sampling.contexts import _BehindSharedPrefix, _SlotRing, _WholeContext
from codeplay_lightning.models.sampling.engine import (
    Samples,
    SamplingConfig,
    _decode,
    _Decoded,
    _finished,
    _samples,
    slot_limited_runs,
)
from codeplay_lightning.models.sampling.picking import _uniforms, inverse_cdf, pick_tokens
from codeplay_lightning.models.shared_prefix import run_prefix

__all__ = [
    "Samples",
    "SamplingConfig",
    "common_prefix_length",
    "inverse_cdf",
    "pick_tokens",
    "sample",
    "sample_streams",
    "slot_limited_runs",
    "token_consistent_prompt",
]


def token_consistent_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, following: str) -> str:
    """The longest prefix of `prompt` whose tokens alone are the tokens it has when `following`
    comes after it, as inside the few-shot block the prompt repeats. A prompt must not end in a
    token its examples never show: SmolLM2's tokenizer makes a final blank line one token, but two
    inside the block, and every puzzle then began with a newline the examples never have. What is
    cut off the end (that newline), the model generates."""
    inside = tokenizer(prompt + following, add_special_tokens=False)["input_ids"]
    for end in range(len(prompt), 0, -1):  # in practice a character or two at most
        ids = tokenizer(prompt[:end], add_special_tokens=False)["input_ids"]
        if ids == inside[: len(ids)]:
            return prompt[:end]
    raise ValueError("no prefix of the prompt tokenizes as it does inside its own text")


@torch.no_grad()
@with_packed_linears
def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    config: SamplingConfig,
    generators: Sequence[torch.Generator] | None = None,
    *,
    rows: int | None = None,
    max_slots: int | None = None,
) -> Samples:
    """Sample one continuation per prompt, at most `rows` at once (None: all at once).

    Continuous batching: on the fast path a batch row whose continuation finishes takes the next prompt at
    once (its prompt's keys and values placed into the row's slots), so every step runs on a full batch
    until the prompts run out; on the plain path the next `rows` prompts start when a batch has finished.
    `max_slots` caps the KV cache at `rows` x (a row's longest prompt after the prefix all prompts share +
    max_new_tokens) slots: prompts too long for that run after the others, in fewer rows.

    `generators`, one CPU generator per prompt, make the run reproducible: prompt i draws its random
    numbers from `generators[i]` only, so it samples the same tokens whatever batch or row it is in (up to
    float rounding). Without them the global torch RNG is used. Identical prompts (a Solver's attempts at
    one puzzle) are prefilled once; on the fast path the token prefix common to all prompts (the few-shot
    block) is also run and held once. For bf16, load the model in bf16 or call this inside
    `torch.autocast`; the log-probs are then those of a forward pass under the same setting.
    """
    if not prompts:
        raise ValueError("sample() needs at least one prompt")
    if generators is not None and len(generators) != len(prompts):
        raise ValueError(f"got {len(generators)} generators for {len(prompts)} prompts; need one per prompt")
    if rows is not None and rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    token_ids = tokenizer(list(prompts))["input_ids"]
    if min(len(ids) for ids in token_ids) == 0:
        raise ValueError("a prompt tokenizes to no tokens; prompts must not be empty")
    decoded = _Decoded(tokenizer, config, generators, [len(ids) for ids in token_ids])
    fast = attention_paths(model).fast
    shared = common_prefix_length(token_ids) if fast else 0
    prefix = run_prefix(model, token_ids[0][:shared])[0] if shared else None
    own_ids = [ids[shared:] for ids in token_ids]
    for run, run_rows in slot_limited_runs(
        [len(ids) for ids in own_ids], rows or len(prompts), config.max_new_tokens, max_slots
    ):
        if fast:
            ring = functools.partial(_SlotRing.start, model, prefix, shared, own_ids, config.max_new_tokens, run)
            _decode(decoded, deque(run), run_rows, ring)
        else:
            batch = functools.partial(_WholeContext.for_prompts, model, own_ids, config.max_new_tokens)
            _decode(decoded, deque(run), run_rows, batch)
    return decoded.samples()


@torch.no_grad()
@with_packed_linears
def sample_streams(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    n_steps: int,
    config: SamplingConfig,
    generators: Sequence[torch.Generator],
) -> Samples:
    """Run one stream per generator for `n_steps` token steps: each samples a continuation of
    `prompt` until a stop (as in `sample`), then starts the next one at once, until its steps run out.

    Continuous batching: every stream stays in the batch at every step. The prompt's keys and
    values are computed once; a stream that restarts forgets its finished continuation and samples
    its next first token from the prompt's own logits, so nothing is re-run. Each stream draws one
    uniform per token from its own generator, so what it samples does not depend on the other
    streams. Returns every continuation, stream by stream and in order; a stream's last one is
    unfinished (`finished` False) when its steps ran out in the middle of it.
    """
    n_streams = len(generators)
    if n_streams < 1 or n_steps < 1:
        raise ValueError("sample_streams needs at least one generator and one step")
    prompt_ids = tokenizer(prompt)["input_ids"]
    context = _context_class(model).for_streams(model, prompt_ids, n_streams, n_steps)
    first_logits, logits = context.logits[:1], context.logits  # (1, V): every continuation's first token; (S, V)
    open_ids: list[list[int]] = [[] for _ in range(n_streams)]
    open_logprobs: list[list[float]] = [[] for _ in range(n_streams)]
    pieces: list[list[tuple[list[int], list[float], bool]]] = [[] for _ in range(n_streams)]
    for step in range(n_steps):
        tokens, token_logprobs = pick_tokens(
            logits,
            config.temperature,
            config.top_p,
            _uniforms(list(generators), n_streams, logits.device),
            config.top_k,
        )
        for stream, token, logprob in zip(range(n_streams), tokens.tolist(), token_logprobs.tolist()):
            open_ids[stream].append(token)
            open_logprobs[stream].append(logprob)
        done = _finished(tokenizer, open_ids, config.stop_strings)
        for stream in (stream for stream in range(n_streams) if done[stream]):
            pieces[stream].append((open_ids[stream], open_logprobs[stream], True))
            open_ids[stream], open_logprobs[stream] = [], []
        if step == n_steps - 1:
            break
        logits = context.advance(tokens)
        if any(done):  # restart: forget the finished continuation, start again after the prompt
            restarted = torch.tensor(done, device=logits.device)
            context.restart(restarted)
            logits[restarted] = first_logits
    for stream in range(n_streams):
        if open_ids[stream]:
            pieces[stream].append((open_ids[stream], open_logprobs[stream], False))
    continuations = [piece for stream_pieces in pieces for piece in stream_pieces]
    return _samples(tokenizer, continuations, [len(prompt_ids)] * len(continuations), config.stop_strings)


def _context_class(model: PreTrainedModel) -> type[_BehindSharedPrefix] | type[_WholeContext]:
    """The shared-prefix path where a test proves it exact for the model's architecture, else the plain one."""
    return _BehindSharedPrefix if attention_paths(model).fast else _WholeContext


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the prefix shared by all `sequences`, leaving each at least one token after it."""
    shortest = min(len(sequence) for sequence in sequences)
    length = 0
    while length < shortest - 1 and all(sequence[length] == sequences[0][length] for sequence in sequences):
        length += 1
    return length
