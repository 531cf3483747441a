"""Attention for a batch of rows that all continue one prefix, whose keys and values are held once.

Rows behind a common prompt (a Setter's streams, the Solver's puzzles behind the few-shot block)
would each hold a copy of the prompt's keys and values and read all of them at every decoding step:
at 32 rows behind an 800-token prompt that is most of a step's memory traffic (156 ms per step
against 75 ms behind a 100-token one). Here the prefix's keys and values are kept once per layer,
the KV cache holds each row's own tokens only, and every query attends to both in one softmax.

`run_prefix` computes the prefix; `forward_behind` runs the model on the rows' tokens behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface, DynamicCache, PreTrainedModel

from codeplay_lightning.models.architectures import using_attention

ATTENTION = "codeplay_shared_prefix"


@dataclass(frozen=True)
class SharedPrefix:
    """The prefix's keys and values, one (H_kv, P, D) tensor per layer, in the dtype attention computes in."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @property
    def length(self) -> int:
        return self.keys[0].shape[1]


def run_prefix(model: PreTrainedModel, prefix_ids: list[int]) -> tuple[SharedPrefix, torch.Tensor]:
    """The prefix's keys and values, in the dtype attention computes in (`compute_dtype`), and the logits (V,)
    in float32 after its last token."""
    cache = DynamicCache(config=model.config)
    output = model(
        input_ids=torch.tensor([prefix_ids], device=model.device), cache=cache, use_cache=True, logits_to_keep=1
    )
    dtype = compute_dtype(model.device, model.dtype)
    prefix = SharedPrefix(
        tuple(layer.keys[0].to(dtype) for layer in cache.layers),
        tuple(layer.values[0].to(dtype) for layer in cache.layers),
    )
    return prefix, output.logits[0, -1].float()


def forward_behind(
    model: PreTrainedModel,
    prefix: SharedPrefix | None,
    input_ids: torch.Tensor,
    sees_own: torch.Tensor,
    position_ids: torch.Tensor,
    cache,
    logits_to_keep: int = 0,
    own_slots: int | None = None,
):
    """The model's forward on `input_ids` (B, q) behind `prefix` (None: no prefix), with `cache` holding
    the rows' own tokens only. `sees_own` (B, q, S) is True where a query sees a slot of the row's own
    cache (after this step's tokens are written); every query sees the whole prefix. A query must see
    at least one slot of its own (its own, if padding), so that no softmax row is empty without a prefix.
    Attention reads the cache up to the last slot any query sees (`own_slots` when the caller knows it): a
    static cache is mostly empty early on."""
    if own_slots is None:
        own_slots = int(sees_own.any(dim=0).any(dim=0).nonzero()[-1]) + 1
    with using_attention(model, ATTENTION):
        return model(
            input_ids=input_ids,
            attention_mask=sees_own[:, None],
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            logits_to_keep=logits_to_keep,
            shared_prefix=prefix,
            own_slots=own_slots,
        )


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    scaling: float,
    dropout: float = 0.0,
    shared_prefix: SharedPrefix | None = None,
    own_slots: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """query (B, H, q, D); key and value (B, H_kv, S, D): the rows' own cache; attention_mask (B, 1, q, S)
    boolean; only the first `own_slots` slots (None: all) are read, no query sees past them. Returns
    (B, q, H, D) in the dtype attention computes in (`compute_dtype`).

    The prefix and the own slots are two partial softmaxes, joined by their log-sum-exps: exactly one softmax
    over both, without copying the prefix into every row. On the prefix, every row's queries go through one
    product, since all rows read the same keys."""
    dtype = compute_dtype(query.device, query.dtype)
    key, value, attention_mask = key[:, :, :own_slots], value[:, :, :own_slots], attention_mask[..., :own_slots]
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    rows = heads // kv_heads * length  # query rows per key head: the heads sharing it, times the queries
    grouped = query.to(dtype).reshape(batch, kv_heads, rows, dim)  # (B, H_kv, G q, D): head h uses key head h // G
    sees = attention_mask[:, :, None].expand(-1, -1, heads // kv_heads, -1, -1).reshape(batch, 1, rows, -1)
    attend = _flash_part if query.device.type == "cpu" else _explicit_part
    with torch.autocast(query.device.type, enabled=False):
        output, total = attend(grouped, key.to(dtype), value.to(dtype), sees, scaling)  # (B, H_kv, G q, D), (…, G q)
        if shared_prefix is not None:
            across = grouped.transpose(0, 1).reshape(1, kv_heads, batch * rows, dim)  # every row's queries at once
            prefix_keys, prefix_values = shared_prefix.keys[module.layer_idx], shared_prefix.values[module.layer_idx]
            from_prefix, prefix_total = attend(across, prefix_keys[None], prefix_values[None], None, scaling)
            from_prefix = from_prefix.view(kv_heads, batch, rows, dim).transpose(0, 1)
            prefix_total = prefix_total.view(kv_heads, batch, rows).transpose(0, 1)
            joint = torch.logaddexp(total, prefix_total)
            output = output * (total - joint).exp()[..., None] + from_prefix * (prefix_total - joint).exp()[..., None]
    # (B, H_kv, G q, D) -> (B, q, H, D), what an attention function returns
    output = output.reshape(batch, heads, length, dim).transpose(1, 2).contiguous().to(dtype)
    return output, None


def compute_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The dtype attention computes in on `device` for tensors of `dtype`: autocast's where it is on."""
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else dtype


def _flash_part(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sees: torch.Tensor | None, scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of query (B, H, q, D) over key, value (B, H, S, D), where `sees` (B, 1, q, S) allows
    (None: everywhere), by the CPU's flash kernel, which accumulates in float32 and also returns the log-sum-exp
    of each query's scores: (output (B, H, q, D) float32, log-sum-exp (B, H, q) float32)."""
    mask = None if sees is None else torch.zeros(sees.shape, dtype=query.dtype).masked_fill_(~sees, float("-inf"))
    output, total = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, False, attn_mask=mask, scale=scaling
    )
    return output.float(), total


def _explicit_part(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sees: torch.Tensor | None, scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`_flash_part` by plain products in float32, on any device."""
    scores = (query.float() @ key.float().transpose(-1, -2)).mul(scaling)  # (B, H, q, S)
    if sees is not None:
        scores = scores.masked_fill(~sees, float("-inf"))
    total = scores.logsumexp(-1)
    return (scores - total[..., None]).exp() @ value.float(), total


AttentionInterface.register(ATTENTION, shared_prefix_attention)
