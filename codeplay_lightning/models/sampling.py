"""Batched sampling with a KV cache over left-padded prompts, returning the log-probs PPO needs.

A prefill over the left-padded prompts, then one forward per new token on the rows still
running. A row stops when its decoded continuation contains a stop string or it samples the
eos token; finished rows are dropped from the batch and the KV cache. The token prefix common to
all prompts is held once (`shared_prefix`); the KV cache holds each row's own tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase, StaticCache

from codeplay_lightning.models.architectures import attention_paths
from codeplay_lightning.models.packed import with_packed_linears
from codeplay_lightning.models.shared_prefix import SharedPrefix, compute_dtype, forward_behind, run_prefix


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


@dataclass(frozen=True)
class Samples:
    """One entry per prompt, in prompt order."""

    texts: list[str]  # continuation, cut before the first stop string (and without the eos token)
    token_ids: list[torch.Tensor]  # (n_i,) int64: generated ids, up to the one completing a stop or eos
    logprobs: list[torch.Tensor]  # (n_i,) float32: log_softmax(logits / T) at each generated id
    finished: list[bool]  # True: stop string or eos reached; False: ran out of max_new_tokens


@torch.no_grad()
@with_packed_linears
def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    config: SamplingConfig,
    generators: Sequence[torch.Generator] | None = None,
) -> Samples:
    """Sample one continuation per prompt.

    `generators`, one CPU generator per prompt, make the run reproducible: row i draws its random
    numbers from `generators[i]` only, so it samples the same tokens whatever batch it is in.
    Without them the global torch RNG is used. Identical prompts (a Solver's attempts at one
    puzzle) are prefilled once; on the fast path the token prefix common to all prompts (the
    few-shot block) is also run and held once. For bf16, load the model in bf16 or call this inside
    `torch.autocast`; the log-probs are then those of a forward pass under the same setting.
    """
    if not prompts:
        raise ValueError("sample() needs at least one prompt")
    if generators is not None and len(generators) != len(prompts):
        raise ValueError(f"got {len(generators)} generators for {len(prompts)} prompts; need one per prompt")
    n_prompts = len(prompts)
    new_ids: list[list[int]] = [[] for _ in range(n_prompts)]
    new_logprobs: list[list[float]] = [[] for _ in range(n_prompts)]
    finished = [False] * n_prompts
    rows = list(range(n_prompts))  # rows[b] = prompt index of batch row b

    context = _context_class(model).for_prompts(model, tokenizer, prompts, config.max_new_tokens)
    logits = context.logits
    for step in range(config.max_new_tokens):
        row_generators = [generators[i] for i in rows] if generators is not None else None
        uniforms = _uniforms(row_generators, len(rows), logits.device)  # (B,)
        tokens, token_logprobs = pick_tokens(
            logits,
            config.temperature,
            config.top_p,
            uniforms,  # (B,), (B,)
            config.top_k,
        )
        for i, token, logprob in zip(rows, tokens.tolist(), token_logprobs.tolist()):
            new_ids[i].append(token)
            new_logprobs[i].append(logprob)
        for i, done in zip(rows, _finished(tokenizer, [new_ids[i] for i in rows], config.stop_strings)):
            finished[i] = done
        keep = [b for b, i in enumerate(rows) if not finished[i]]
        if not keep or step == config.max_new_tokens - 1:
            break
        if len(keep) < len(rows):  # drop finished rows from the batch and the cache
            keep_index = torch.tensor(keep, device=logits.device)
            context.keep(keep_index)
            tokens, rows = tokens[keep_index], [rows[b] for b in keep]
        logits = context.advance(tokens)

    return _samples(tokenizer, list(zip(new_ids, new_logprobs, finished)), config.stop_strings)


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
    context = _context_class(model).for_streams(model, tokenizer(prompt)["input_ids"], n_streams, n_steps)
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
    return _samples(tokenizer, [piece for stream_pieces in pieces for piece in stream_pieces], config.stop_strings)


def _samples(
    tokenizer: PreTrainedTokenizerBase,
    continuations: list[tuple[list[int], list[float], bool]],
    stop_strings: tuple[str, ...],
) -> Samples:
    """`Samples` from (token ids, log-probs, finished) per continuation."""
    return Samples(
        texts=[_continuation_text(tokenizer, ids, stop_strings) for ids, _, _ in continuations],
        token_ids=[torch.tensor(ids, dtype=torch.long) for ids, _, _ in continuations],
        logprobs=[torch.tensor(lps, dtype=torch.float32) for _, lps, _ in continuations],
        finished=[finished for _, _, finished in continuations],
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


def _context_class(model: PreTrainedModel) -> type[_BehindSharedPrefix] | type[_WholeContext]:
    """The shared-prefix path where a test proves it exact for the model's architecture, else the plain one."""
    return _BehindSharedPrefix if attention_paths(model).fast else _WholeContext


def _distinct_token_ids(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]) -> list[list[int]]:
    """The token ids of the distinct prompts, in first-seen order."""
    token_ids = tokenizer(list(dict.fromkeys(prompts)))["input_ids"]
    if min(len(ids) for ids in token_ids) == 0:
        raise ValueError("a prompt tokenizes to no tokens; prompts must not be empty")
    return token_ids


def _left_padded(token_ids: list[list[int]], room: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_ids` left-padded, (U, R) (any id pads: it is masked), and the slots that hold a token (U, R + room):
    False on the padding and the room."""
    length = max(len(ids) for ids in token_ids)
    padded = torch.zeros(len(token_ids), length, dtype=torch.long)
    real = torch.zeros(len(token_ids), length + room, dtype=torch.bool)
    for u, ids in enumerate(token_ids):
        padded[u, length - len(ids) :] = torch.tensor(ids)
        real[u, length - len(ids) : length] = True
    return padded.to(device), real.to(device)


def _rows_of_prompts(prompts: Sequence[str], device: torch.device) -> torch.Tensor | None:
    """(B,) the distinct prompt (in first-seen order) each prompt is, or None when all are distinct."""
    distinct = {prompt: u for u, prompt in enumerate(dict.fromkeys(prompts))}
    if len(distinct) == len(prompts):
        return None
    return torch.tensor([distinct[prompt] for prompt in prompts], device=device)


class _BehindSharedPrefix:
    """The fast path: the token prefix common to all rows is run and held once (`shared_prefix.py`); a static
    cache holds each row's own tokens, [left padding | rest of its prompt | new tokens]. `sees` (B, S) marks
    the own slots a row attends to; `positions` (B, 1) is each row's next token's position."""

    def __init__(
        self,
        model,
        prefix: SharedPrefix | None,
        cache: StaticCache,
        sees: torch.Tensor,
        positions: torch.Tensor,
        next_slot: int,
        logits: torch.Tensor,
        prompt_length: int = 0,
    ):
        self.model, self.prefix, self.cache, self.sees, self.positions = model, prefix, cache, sees, positions
        self.next_slot, self.logits = next_slot, logits
        self.prompt_length = prompt_length  # streams: the position a restarted stream starts from

    @classmethod
    def for_prompts(cls, model, tokenizer, prompts: Sequence[str], max_new_tokens: int) -> _BehindSharedPrefix:
        """The prompts run behind their longest common token prefix, identical prompts once."""
        device = model.device
        token_ids = _distinct_token_ids(tokenizer, prompts)
        shared = common_prefix_length(token_ids)
        rest_ids, real = _left_padded([ids[shared:] for ids in token_ids], max_new_tokens, device)
        rest_length = rest_ids.shape[1]
        prefix = run_prefix(model, token_ids[0][:shared])[0] if shared else None
        cache = _new_cache(model, max_cache_len=rest_length + max_new_tokens)
        slots = torch.arange(rest_length + max_new_tokens, device=device)
        causal = slots[None, :] <= slots[:rest_length, None]  # (R, S)
        itself = slots[None, :] == slots[:rest_length, None]  # a padding token sees itself only
        sees_own = (real[:, None, :] & causal) | itself  # (U, R, S)
        position_ids = shared + (real[:, :rest_length].cumsum(dim=1) - 1).clamp(min=0)  # (U, R): C, C + 1, ...
        output = forward_behind(model, prefix, rest_ids, sees_own, position_ids, cache, logits_to_keep=1)
        context = cls(model, prefix, cache, real, position_ids[:, -1:] + 1, rest_length, output.logits[:, -1].float())
        if (rows := _rows_of_prompts(prompts, device)) is not None:
            context.keep(rows)
        return context

    @classmethod
    def for_streams(cls, model, prompt_ids: list[int], n_streams: int, n_steps: int) -> _BehindSharedPrefix:
        """`n_streams` rows behind the whole prompt, with room for `n_steps` tokens each."""
        prefix, first_logits = run_prefix(model, prompt_ids)
        sees = torch.zeros(n_streams, n_steps, dtype=torch.bool, device=model.device)
        positions = torch.full((n_streams, 1), len(prompt_ids), device=model.device)
        return cls(
            model,
            prefix,
            _new_cache(model, max_cache_len=n_steps),
            sees,
            positions,
            0,
            first_logits.expand(n_streams, -1),
            prompt_length=len(prompt_ids),
        )

    def keep(self, rows: torch.Tensor) -> None:
        """Keep (or repeat) the batch rows `rows` (B',), in that order."""
        self.cache.reorder_cache(rows)
        self.sees, self.positions, self.logits = self.sees[rows], self.positions[rows], self.logits[rows]

    def advance(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (B,); returns the next logits (B, V) in float32."""
        self.sees[:, self.next_slot] = True
        output = forward_behind(
            self.model, self.prefix, tokens[:, None], self.sees[:, None], self.positions, self.cache
        )
        self.positions, self.next_slot = self.positions + 1, self.next_slot + 1
        self.logits = output.logits[:, -1, :].float()
        return self.logits

    def restart(self, rows: torch.Tensor) -> None:
        """The rows marked in `rows` (B,) bool forget their own tokens: next they see the prompt only."""
        self.sees[rows] = False
        self.positions[rows] = self.prompt_length


class _WholeContext:
    """The plain path, through the model's own cache: every row holds its whole context in it, contiguous
    and ending at the latest slot ([padding | prompt | new tokens]), so that a local or sliding window,
    which counts cache slots, counts positions. `real` (B, S) marks the slots a row attends to."""

    def __init__(
        self,
        model,
        cache: DynamicCache,
        real: torch.Tensor,
        positions: torch.Tensor,
        next_slot: int,
        logits: torch.Tensor,
    ):
        self.model, self.cache, self.real, self.positions, self.next_slot = model, cache, real, positions, next_slot
        self.logits = logits
        self.prompt_length = 0  # streams: the prompt's length, and its keys and values per layer, for restarts
        self.prompt_states: list[tuple[torch.Tensor, torch.Tensor]] = []

    @classmethod
    def for_prompts(cls, model, tokenizer, prompts: Sequence[str], max_new_tokens: int) -> _WholeContext:
        """The distinct prompts, left-padded, run once each."""
        ids, real = _left_padded(_distinct_token_ids(tokenizer, prompts), max_new_tokens, model.device)
        length = ids.shape[1]
        position_ids = (real[:, :length].cumsum(dim=1) - 1).clamp(min=0)  # (U, L)
        cache = DynamicCache()  # full layers: a window is applied by the mask, over contiguous slots
        output = model(
            input_ids=ids,
            attention_mask=real[:, :length],
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        context = cls(model, cache, real, position_ids[:, -1:] + 1, length, output.logits[:, -1].float())
        if (rows := _rows_of_prompts(prompts, model.device)) is not None:
            context.keep(rows)
        return context

    @classmethod
    def for_streams(cls, model, prompt_ids: list[int], n_streams: int, n_steps: int) -> _WholeContext:
        """The prompt run once, then copied into each of `n_streams` rows, with room for `n_steps` tokens."""
        cache = DynamicCache()
        output = model(
            input_ids=torch.tensor([prompt_ids], device=model.device), cache=cache, use_cache=True, logits_to_keep=1
        )
        length = len(prompt_ids)
        real = torch.zeros(n_streams, length + n_steps, dtype=torch.bool, device=model.device)
        real[:, :length] = True
        positions = torch.full((n_streams, 1), length, device=model.device)
        context = cls(model, cache, real, positions, length, output.logits[:, -1].float())
        context.prompt_length = length
        context.prompt_states = [(layer.keys[0].clone(), layer.values[0].clone()) for layer in cache.layers]
        context.keep(torch.zeros(n_streams, dtype=torch.long, device=model.device))
        return context

    def keep(self, rows: torch.Tensor) -> None:
        """Keep (or repeat) the batch rows `rows` (B',), in that order."""
        self.cache.reorder_cache(rows)
        self.real, self.positions, self.logits = self.real[rows], self.positions[rows], self.logits[rows]

    def advance(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (B,); returns the next logits (B, V) in float32."""
        self.real[:, self.next_slot] = True
        self.next_slot += 1
        output = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.real[:, : self.next_slot],
            position_ids=self.positions,
            cache=self.cache,
            use_cache=True,
        )
        self.positions = self.positions + 1
        self.logits = output.logits[:, -1, :].float()
        return self.logits

    def restart(self, rows: torch.Tensor) -> None:
        """The rows marked in `rows` (B,) bool start again after the prompt: the prompt's keys and values are
        copied into their latest slots (the stream has taken at least as many steps as the prompt has tokens
        of room before them, since the cache began with the prompt) and their older slots are masked."""
        start = self.next_slot - self.prompt_length
        for layer, (keys, values) in zip(self.cache.layers, self.prompt_states):
            layer.keys[rows, :, start : self.next_slot] = keys.to(layer.keys.dtype)
            layer.values[rows, :, start : self.next_slot] = values.to(layer.values.dtype)
        self.real[rows] = False
        self.real[rows, start : self.next_slot] = True
        self.positions[rows] = self.prompt_length


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the prefix shared by all `sequences`, leaving each at least one token after it."""
    shortest = min(len(sequence) for sequence in sequences)
    length = 0
    while length < shortest - 1 and all(sequence[length] == sequences[0][length] for sequence in sequences):
        length += 1
    return length


def _new_cache(model: PreTrainedModel, max_cache_len: int) -> StaticCache:
    """A preallocated cache of the rows' own tokens: a growing one copies itself at every step. It holds the dtype
    the shared-prefix attention computes in, so that no step converts the whole cache (a static layer holds one
    dtype; under autocast RoPE leaves keys in float32 and values in bf16). It is small: the prompt's keys and
    values are held once, outside it."""
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    dtype = compute_dtype(model.device, model.dtype)
    for layer in cache.layers:
        layer.update = functools.partial(_update_in, dtype, layer.update)
    return cache


def _update_in(
    dtype: torch.dtype, update, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    return update(key_states.to(dtype), value_states.to(dtype), *args, **kwargs)


def pick_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, uniforms: torch.Tensor, top_k: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose one token per row of `logits` (B, V) and return `(tokens, logprobs)`, both (B,).

    Temperature 0 takes the argmax and reports its log-prob at temperature 1. Otherwise a token is
    drawn by inverse CDF with `uniforms` (B,) in [0, 1) from softmax(logits / T) restricted to the
    `top_k` most likely tokens (when > 0) and then to the top-p nucleus of those, as Hugging Face
    applies them; its log-prob is log_softmax(logits / T) over the full vocabulary: the
    restrictions only limit what can be drawn, they do not change the reported log-prob.
    """
    if temperature == 0:
        tokens = logits.argmax(dim=-1)  # (B,)
        return tokens, torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    top = logits.amax(dim=-1, keepdim=True)  # (B, 1)
    weights = (logits - top).mul_(1 / temperature).exp_()  # (B, V): probabilities times the row's normaliser
    log_normaliser = weights.sum(dim=-1).log()  # (B,): of the logits less the top one, at T
    if top_p < 1 or 0 < top_k < weights.shape[-1]:  # the most likely tokens until their mass reaches top_p
        weights, order = weights.sort(dim=-1, descending=True)  # (B, V), (B, V); ~50 ms at B=32
        if top_k:
            weights[:, top_k:] = 0.0
        mass_before = weights.cumsum(dim=-1) - weights  # (B, V): mass of strictly more likely kept tokens
        nucleus = top_p * weights.sum(dim=-1, keepdim=True)  # (B, 1): top_p of what top_k kept
        weights = weights.masked_fill(mass_before >= nucleus, 0.0)  # the top token always kept
        tokens = order.gather(-1, inverse_cdf(weights, uniforms)[:, None]).squeeze(-1)
    else:
        tokens = inverse_cdf(weights, uniforms)
    return tokens, (logits.gather(-1, tokens[:, None]) - top).squeeze(-1) / temperature - log_normaliser


CDF_BLOCK = 256  # tokens per block of the two-level inverse CDF


def inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row of `weights` (B, V) >= 0, not all zero: the first token whose cumulative weight exceeds u times the
    row's total, for u in `uniforms` (B,), in [0, 1). Never a token of weight 0.

    In two levels, as a cumulative sum over the whole vocabulary is sequential and slow (7 ms of a 64-row decoding
    step at V = 49,152): the block of CDF_BLOCK tokens where the mass is crossed, then the token inside it."""
    batch, vocab = weights.shape
    padding = -vocab % CDF_BLOCK
    blocks = (torch.nn.functional.pad(weights, (0, padding)) if padding else weights).view(batch, -1, CDF_BLOCK)
    block_cdf = blocks.sum(dim=-1).cumsum(dim=-1)  # (B, N)
    total = block_cdf[:, -1:]  # (B, 1)
    target = uniforms[:, None].to(weights.dtype) * total  # (B, 1)
    block = _first_exceeding(block_cdf, target)  # (B, 1)
    inside = blocks.gather(1, block[:, :, None].expand(-1, -1, CDF_BLOCK)).squeeze(1).cumsum(dim=-1)  # (B, BLOCK)
    before = block_cdf.gather(1, block) - inside[:, -1:]  # (B, 1): the mass of the blocks before
    offset = _first_exceeding(inside, (target - before).clamp(min=0))  # (B, 1)
    return (block * CDF_BLOCK + offset).squeeze(-1)


def _first_exceeding(cdf: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B, 1): the first index where `cdf` (B, N), non-decreasing, exceeds `target` (B, 1); where rounding puts the
    target at or past the end, the first index reaching the end, whose own step is positive."""
    exceeding = torch.searchsorted(cdf, target, right=True)
    return torch.minimum(exceeding, torch.searchsorted(cdf, cdf[:, -1:].contiguous()))


def _uniforms(generators: list[torch.Generator] | None, batch_size: int, device: torch.device) -> torch.Tensor:
    """(B,) uniforms in [0, 1): one draw from each row's generator, or from the global RNG."""
    if generators is None:
        return torch.rand(batch_size, device=device)
    return torch.cat([torch.rand(1, generator=generator) for generator in generators]).to(device)


def _continuation_text(tokenizer: PreTrainedTokenizerBase, ids: list[int], stop_strings: tuple[str, ...]) -> str:
    """Decoded `ids` without a final eos token, cut before the earliest stop string."""
    if ids and ids[-1] == tokenizer.eos_token_id:
        ids = ids[:-1]
    text = tokenizer.decode(ids)
    cut = min((text.find(stop) for stop in stop_strings if stop in text), default=len(text))
    return text[:cut]
