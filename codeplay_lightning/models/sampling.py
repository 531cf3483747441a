"""Batched sampling with a KV cache, returning the log-probs PPO needs.

`sample` runs its prompts through a fixed number of batch rows: a prefill of each prompt's own tokens,
then one forward per new token on every row. A row stops when its decoded continuation contains a stop
string or it samples the eos token; on the fast path its slots take the next prompt at once
(continuous batching), so the batch stays full until the prompts run out. The token prefix common to
all prompts is held once (`shared_prefix`); the KV cache holds each row's own tokens. `sample_streams`
runs one prompt as streams that restart in place.
"""

from __future__ import annotations

import functools
from collections import Counter, deque
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
    prompt_lengths: list[int]  # tokens of the prompt each continuation followed


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


def _context_class(model: PreTrainedModel) -> type[_BehindSharedPrefix] | type[_WholeContext]:
    """The shared-prefix path where a test proves it exact for the model's architecture, else the plain one."""
    return _BehindSharedPrefix if attention_paths(model).fast else _WholeContext


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
            layer.update = functools.partial(_write_column, self, layer)
        self.sees = torch.zeros(n_rows, self.width, dtype=torch.bool, device=device)
        self.positions = torch.zeros(n_rows, 1, dtype=torch.long, device=device)
        self.logits = example.logits.new_empty(n_rows, example.logits.shape[-1])


def _write_column(
    ring: _SlotRing, layer, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """A ring layer's update: this step's keys and values (B, H_kv, 1, D) into the column being written."""
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
