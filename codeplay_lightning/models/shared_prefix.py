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

from codeplay_lightning.models.families import using_attention

ATTENTION = "codeplay_shared_prefix"


@dataclass(frozen=True)
class SharedPrefix:
    """The prefix's keys and values, one (H_kv, P, D) float32 tensor per layer."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @property
    def length(self) -> int:
        return self.keys[0].shape[1]


def run_prefix(model: PreTrainedModel, prefix_ids: list[int]) -> tuple[SharedPrefix, torch.Tensor]:
    """The prefix's keys and values, kept in float32 (the attention's dtype), and the logits (V,) in
    float32 after its last token."""
    cache = DynamicCache(config=model.config)
    output = model(
        input_ids=torch.tensor([prefix_ids], device=model.device), cache=cache, use_cache=True, logits_to_keep=1
    )
    prefix = SharedPrefix(
        tuple(layer.keys[0].float() for layer in cache.layers), tuple(layer.values[0].float() for layer in cache.layers)
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
):
    """The model's forward on `input_ids` (B, q) behind `prefix` (None: no prefix), with `cache` holding
    the rows' own tokens only. `sees_own` (B, q, S) is True where a query sees a slot of the row's own
    cache (after this step's tokens are written); every query sees the whole prefix. A query must see
    at least one slot of its own (its own, if padding), so that no softmax row is empty without a prefix.
    Attention reads the cache up to the last slot any query sees: a static cache is mostly empty early on."""
    seen = sees_own.any(dim=0).any(dim=0)  # (S,)
    own_slots = int(seen.nonzero()[-1]) + 1
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
    (B, q, H, D). Scores and softmax in float32 (as SDPA accumulates), autocast off."""
    key, value, attention_mask = key[:, :, :own_slots], value[:, :, :own_slots], attention_mask[..., :own_slots]
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    rows = heads // kv_heads * length  # query rows per key head: the heads sharing it, times the queries
    with torch.autocast(query.device.type, enabled=False):
        grouped = query.float().reshape(batch, kv_heads, rows, dim)  # (B, H_kv, G q, D): head h uses key head h // G
        sees = attention_mask[:, :, None].expand(-1, -1, heads // kv_heads, -1, -1).reshape(batch, 1, rows, -1)
        own_scores = (grouped @ key.float().transpose(2, 3)).masked_fill(~sees, float("-inf"))  # (B, H_kv, G q, S)
        if shared_prefix is None:
            output = own_scores.mul(scaling).softmax(-1) @ value.float()
        else:
            prefix_keys = shared_prefix.keys[module.layer_idx]  # (H_kv, P, D)
            prefix_values = shared_prefix.values[module.layer_idx]
            across = grouped.transpose(0, 1).reshape(kv_heads, batch * rows, dim)  # (H_kv, B G q, D): one product
            prefix_scores = (across @ prefix_keys.transpose(1, 2)).view(kv_heads, batch, rows, -1).transpose(0, 1)
            weights = torch.cat([prefix_scores, own_scores], dim=-1).mul(scaling).softmax(-1)  # (B, H_kv, G q, P + S)
            prefix_weights = weights[..., : shared_prefix.length].transpose(0, 1).reshape(kv_heads, batch * rows, -1)
            from_prefix = (prefix_weights @ prefix_values).view(kv_heads, batch, rows, dim).transpose(0, 1)
            output = from_prefix + weights[..., shared_prefix.length :] @ value.float()  # (B, H_kv, G q, D)
    # (B, H_kv, G q, D) -> (B, q, H, D), what an attention function returns
    output = output.reshape(batch, heads, length, dim).transpose(1, 2).contiguous().to(query.dtype)
    return output, None


AttentionInterface.register(ATTENTION, shared_prefix_attention)
