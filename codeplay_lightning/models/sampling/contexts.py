"""The KV-cache contexts the decoding loop steps: each holds its batch rows' cache, the next `logits` and what each
row attends to, and feeds one token per row (`advance`). `_SlotRing` is `sample`'s fast path (rows refilled in
place behind the shared prefix), `_BehindSharedPrefix` that of `sample_streams`, `_WholeContext` the plain path of
both (the model's own cache).
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, StaticCache

from codeplay_lightning.models.shared_prefix import SharedPrefix, compute_dtype, forward_behind, run_prefix


def _left_padded(token_ids: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_ids` left-padded, (U, R) (any id pads: it is masked), and the slots that hold a token (U, R)."""
    length = max(len(ids) for ids in token_ids)
    padded = torch.zeros(len(token_ids), length, dtype=torch.long)
    real = torch.zeros(len(token_ids), length, dtype=torch.bool)
    for u, ids in enumerate(token_ids):
        padded[u, length - len(ids) :] = torch.tensor(ids)
        real[u, length - len(ids) :] = True
    return padded.to(device), real.to(device)


def _distinct(token_ids: list[list[int]], device: torch.device) -> tuple[list[list[int]], torch.Tensor]:
    """The distinct token lists (first-seen order) and (B,) which of them each row is."""
    index = {tuple(ids): u for u, ids in enumerate(dict.fromkeys(map(tuple, token_ids)))}
    return [list(ids) for ids in index], torch.tensor([index[tuple(ids)] for ids in token_ids], device=device)


@dataclass(frozen=True)
class _Prefilled:
    """A prompt's own tokens run behind the shared prefix: keys and values per layer, (H_kv, r, D) each, in the
    dtype attention computes in, and the logits (V,) in float32 after its last token."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    logits: torch.Tensor


class _SlotRing:
    """`sample`'s fast path. Behind the shared prefix (`shared_prefix.py`) each batch row holds its own tokens (the
    rest of its prompt, then what it samples) in a ring of `width` cache columns: each step writes one column
    for every row, and a row that takes a new prompt gets the prompt's keys and values in the columns just before
    the next one written. Attention sums over the columns a row sees (`sees`, (B, W)), so their order does not
    matter (positions are in the keys); a row spans at most its prompt's own length + max_new_tokens - 1 <
    `width` columns, so no column it sees is written over while it runs. Identical prompts are run once, and
    held until their last row has taken them."""

    refills = True

    def __init__(self, model, prefix: SharedPrefix | None, shared: int, own_ids, width: int, run: list[int]):
        self.model, self.prefix, self.shared, self.own_ids, self.width = model, prefix, shared, own_ids, width
        self.column = max(len(own_ids[i]) for i in run)  # the next column written: room before it for any prompt
        self.waiting = Counter(tuple(own_ids[i]) for i in run)  # rows still to take each distinct prompt
        self.prefilled: dict[tuple[int, ...], _Prefilled] = {}
        self.cache: StaticCache | None = None  # allocated at the first fill, when the batch's rows are known

    @classmethod
    def start(cls, model, prefix, shared: int, own_ids, max_new_tokens: int, run: list[int], rows: list[int]):
        """A ring for the prompts `run`, its batch rows starting `rows`."""
        ring = cls(model, prefix, shared, own_ids, max(len(own_ids[i]) for i in run) + max_new_tokens, run)
        ring.fill(list(range(len(rows))), rows)
        return ring

    def fill(self, slots: list[int], rows: list[int]) -> None:
        """Batch rows `slots` start the prompts `rows`, in that order: the next `logits` are after their prompts."""
        prompts = [tuple(self.own_ids[i]) for i in rows]
        self._prefill([prompt for prompt in dict.fromkeys(prompts) if prompt not in self.prefilled])
        if self.cache is None:
            self._allocate(len(slots), self.prefilled[prompts[0]])
        for slot, prompt in zip(slots, prompts):
            entry = self.prefilled[prompt]
            columns = (self.column - len(prompt) + torch.arange(len(prompt), device=self.sees.device)) % self.width
            for layer, keys, values in zip(self.cache.layers, entry.keys, entry.values):
                layer.keys[slot][:, columns] = keys
                layer.values[slot][:, columns] = values
            self.sees[slot] = False
            self.sees[slot, columns] = True
            self.positions[slot] = self.shared + len(prompt)
            self.logits[slot] = entry.logits
            self.waiting[prompt] -= 1
            if not self.waiting[prompt]:
                del self.prefilled[prompt]

    def keep(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` (B',), in that order."""
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[rows], layer.values[rows]
        self.sees, self.positions, self.logits = self.sees[rows], self.positions[rows], self.logits[rows]

    def advance(self, tokens: torch.Tensor) -> None:
        """Feed one token per row (B,); the next `logits` (B, V) are in float32."""
        column = self.column % self.width
        self.sees[:, column] = True
        self.written = column
        output = forward_behind(
            self.model,
            self.prefix,
            tokens[:, None],
            self.sees[:, None],
            self.positions,
            self.cache,
            own_slots=min(self.column + 1, self.width),  # before the ring wraps, the columns after are empty
        )
        self.column, self.positions = self.column + 1, self.positions + 1
        self.logits = output.logits[:, -1, :].float()

    def _prefill(self, prompts: list[tuple[int, ...]]) -> None:
        """Run `prompts` (own token ids) behind the prefix, left-padded in one batch, into `prefilled`."""
        if not prompts:
            return
        ids, real = _left_padded([list(prompt) for prompt in prompts], self.model.device)
        length = ids.shape[1]
        slots = torch.arange(length, device=ids.device)
        causal = slots[None, :] <= slots[:, None]  # (R, R)
        itself = slots[None, :] == slots[:, None]  # a padding token sees itself only
        sees_own = (real[:, None, :] & causal) | itself  # (U, R, R)
        position_ids = self.shared + (real.cumsum(dim=1) - 1).clamp(min=0)  # (U, R): C, C + 1, ...
        cache = _new_cache(self.model, max_cache_len=length)
        output = forward_behind(self.model, self.prefix, ids, sees_own, position_ids, cache, logits_to_keep=1)
        logits = output.logits[:, -1].float()
        for u, prompt in enumerate(prompts):
            own = slice(length - len(prompt), length)
            self.prefilled[prompt] = _Prefilled(
                [layer.keys[u, :, own].clone() for layer in cache.layers],
                [layer.values[u, :, own].clone() for layer in cache.layers],
                logits[u],
            )

    def _allocate(self, n_rows: int, example: _Prefilled) -> None:
        """The ring of `n_rows` rows, shaped like `example`'s keys and values, and the rows' state."""
        device = example.logits.device
        self.cache = StaticCache(config=self.model.config, max_cache_len=self.width)
        for layer, keys, values in zip(self.cache.layers, example.keys, example.values):
            layer.keys = keys.new_zeros(n_rows, keys.shape[0], self.width, keys.shape[-1])
            layer.values = values.new_zeros(n_rows, values.shape[0], self.width, values.shape[-1])
            layer.is_initialized = True
            # weak references: a strong one from the layer to itself or the ring would make a reference cycle, which
            # only the cyclic collector frees, and it may not run for many iterations (the cache's memory with it)
            layer.update = functools.partial(_write_column, weakref.ref(self), weakref.ref(layer))
        self.sees = torch.zeros(n_rows, self.width, dtype=torch.bool, device=device)
        self.positions = torch.zeros(n_rows, 1, dtype=torch.long, device=device)
        self.logits = example.logits.new_empty(n_rows, example.logits.shape[-1])


def _write_column(
    ring_ref: weakref.ref, layer_ref: weakref.ref, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """A ring layer's update: this step's keys and values (B, H_kv, 1, D) into the column being written."""
    ring, layer = ring_ref(), layer_ref()
    layer.keys[:, :, ring.written] = key_states[:, :, 0]
    layer.values[:, :, ring.written] = value_states[:, :, 0]
    return layer.keys, layer.values


class _BehindSharedPrefix:
    """The fast path of `sample_streams`: the prompt is run and held once (`shared_prefix.py`); a static cache
    holds each stream's own tokens. `sees` (B, S) marks the own slots a row attends to; `positions` (B, 1) is
    each row's next token's position."""

    def __init__(
        self,
        model,
        prefix: SharedPrefix,
        cache: StaticCache,
        sees: torch.Tensor,
        positions: torch.Tensor,
        next_slot: int,
        logits: torch.Tensor,
        prompt_length: int,
    ):
        self.model, self.prefix, self.cache, self.sees, self.positions = model, prefix, cache, sees, positions
        self.next_slot, self.logits = next_slot, logits
        self.prompt_length = prompt_length  # the position a restarted stream starts from

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
            len(prompt_ids),
        )

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
    """The plain path of both samplers, through the model's own cache: every row holds its whole context in it,
    contiguous and ending at the latest slot ([padding | prompt | new tokens]), so that a local or sliding
    window, which counts cache slots, counts positions. `real` (B, S) marks the slots a row attends to."""

    refills = False  # `sample`: a finished row is dropped; the next prompts start in a new batch

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
    def for_prompts(cls, model, token_ids: list[list[int]], max_new_tokens: int, rows: list[int]) -> _WholeContext:
        """The prompts `rows` (indices into `token_ids`), one per batch row; the distinct ones left-padded and run
        once each, with room for `max_new_tokens`."""
        distinct, of_row = _distinct([token_ids[i] for i in rows], model.device)
        ids, real = _left_padded(distinct, model.device)
        length = ids.shape[1]
        position_ids = (real.cumsum(dim=1) - 1).clamp(min=0)  # (U, L)
        cache = DynamicCache()  # full layers: a window is applied by the mask, over contiguous slots
        output = model(
            input_ids=ids,
            attention_mask=real,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        real = torch.nn.functional.pad(real, (0, max_new_tokens))
        context = cls(model, cache, real, position_ids[:, -1:] + 1, length, output.logits[:, -1].float())
        context.keep(of_row)
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


def _new_cache(model: PreTrainedModel, max_cache_len: int) -> StaticCache:
    """A preallocated cache of the rows' own tokens: a growing one copies itself at every step. It holds the dtype
    the shared-prefix attention computes in, so that no step converts the whole cache (a static layer holds one
    dtype; under autocast RoPE leaves keys in float32 and values in bf16). It is small: the prompt's keys and
    values are held once, outside it.

    A layer's update holds the layer by a weak reference: a strong one (its own bound `update`) would be a reference
    cycle, which frees the cache only when the cyclic collector runs, and a long run's full collections are rare:
    every sampling's caches then stayed in memory, and the peak grew iteration after iteration."""
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    dtype = compute_dtype(model.device, model.dtype)
    for layer in cache.layers:
        layer.update = functools.partial(_update_in, dtype, weakref.ref(layer))
    return cache


def _update_in(
    dtype: torch.dtype, layer_ref: weakref.ref, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    layer = layer_ref()
    return type(layer).update(layer, key_states.to(dtype), value_states.to(dtype), *args, **kwargs)
