"""Attention behind a prefix held once, against a naive loop over rows, heads and queries."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import StaticCache

from codeplay_lightning.models import shared_prefix
from codeplay_lightning.models.shared_prefix import SharedPrefix, forward_behind, run_prefix, shared_prefix_attention


def naive_attention(query, key, value, sees, prefix_keys, prefix_values, scaling):
    """One softmax per (row, head, query) over the prefix and the row's visible own slots."""
    batch, heads, length, dim = query.shape
    group = heads // key.shape[1]
    output = torch.zeros(batch, length, heads, dim)
    for b in range(batch):
        for h in range(heads):
            kv = h // group
            for q in range(length):
                keys = [prefix_keys[kv, p] for p in range(prefix_keys.shape[1])]
                values = [prefix_values[kv, p] for p in range(prefix_keys.shape[1])]
                keys += [key[b, kv, s] for s in range(key.shape[2]) if sees[b, q, s]]
                values += [value[b, kv, s] for s in range(key.shape[2]) if sees[b, q, s]]
                scores = [float(query[b, h, q] @ k) * scaling for k in keys]
                top = max(scores)
                weights = [math.exp(score - top) for score in scores]
                output[b, q, h] = sum(w * v for w, v in zip(weights, values)) / sum(weights)
    return output


@pytest.mark.parametrize("prefix_length", [0, 5])
@pytest.mark.parametrize("length", [1, 3])
def test_matches_a_naive_softmax_over_prefix_and_own_slots(prefix_length, length):
    generator = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, slots, dim = 3, 4, 2, 6, 8
    query = torch.randn(batch, heads, length, dim, generator=generator)
    key, value = (torch.randn(batch, kv_heads, slots, dim, generator=generator) for _ in range(2))
    sees = torch.rand(batch, length, slots, generator=generator) < 0.5
    sees[:, :, 0] = True  # every query sees a slot
    prefix_keys, prefix_values = (torch.randn(kv_heads, prefix_length, dim, generator=generator) for _ in range(2))
    prefix = SharedPrefix((prefix_keys,), (prefix_values,)) if prefix_length else None
    ours, _ = shared_prefix_attention(
        SimpleNamespace(layer_idx=0), query, key, value, sees[:, None], 0.3, shared_prefix=prefix
    )
    expected = naive_attention(query, key, value, sees, prefix_keys, prefix_values, 0.3)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)


def test_slots_past_own_slots_are_not_read():
    """A static cache's unused slots may hold anything: NaN there would poison the values' product."""
    generator = torch.Generator().manual_seed(1)
    batch, heads, kv_heads, slots, used, dim = 2, 4, 2, 7, 4, 8
    query = torch.randn(batch, heads, 1, dim, generator=generator)
    key, value = (torch.randn(batch, kv_heads, slots, dim, generator=generator) for _ in range(2))
    sees = torch.zeros(batch, 1, slots, dtype=torch.bool)
    sees[:, :, :used] = True
    prefix_keys, prefix_values = (torch.randn(kv_heads, 3, dim, generator=generator) for _ in range(2))
    expected = naive_attention(query, key, value, sees, prefix_keys, prefix_values, 0.3)
    key[:, :, used:], value[:, :, used:] = float("nan"), float("nan")
    ours, _ = shared_prefix_attention(
        SimpleNamespace(layer_idx=0),
        query,
        key,
        value,
        sees[:, None],
        0.3,
        shared_prefix=SharedPrefix((prefix_keys,), (prefix_values,)),
        own_slots=used,
    )
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)


def test_rows_behind_a_prefix_get_the_full_sequences_logits_and_the_attention_is_restored(tiny_llama):
    ids = torch.randint(3, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    ids[:, :5] = ids[0, :5]  # two rows sharing a 5-token prefix
    prefix, last_logits = run_prefix(tiny_llama, ids[0, :5].tolist())
    assert prefix.length == 5 and len(prefix.keys) == tiny_llama.config.num_hidden_layers
    cache = StaticCache(config=tiny_llama.config, max_cache_len=4)
    sees = torch.ones(4, 4, dtype=torch.bool).tril().expand(2, -1, -1)  # (B, q, S): causal over the own slots
    with torch.no_grad():
        behind = forward_behind(tiny_llama, prefix, ids[:, 5:], sees, torch.arange(5, 9).expand(2, -1), cache)
        full = tiny_llama(input_ids=ids).logits
    torch.testing.assert_close(behind.logits, full[:, 5:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last_logits, full[0, 4], atol=1e-5, rtol=1e-5)
    assert tiny_llama.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("part", [shared_prefix._flash_part, shared_prefix._explicit_part])
@pytest.mark.parametrize("masked", [True, False])
def test_each_partial_softmax_gives_the_output_and_log_sum_exp_of_a_plain_one(part, masked):
    """The CPU's flash kernel and the plain products elsewhere: the two halves the prefix and the own slots are
    joined from."""
    generator = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(3, 2, n, 8, generator=generator) for n in (4, 6, 6))
    sees = torch.rand(3, 1, 4, 6, generator=generator) < 0.6
    sees[..., 0] = True
    scores = (query @ key.transpose(-1, -2)) * 0.3
    if masked:
        scores = scores.masked_fill(~sees, float("-inf"))
    output, total = part(query, key, value, sees if masked else None, 0.3)
    torch.testing.assert_close(total, scores.logsumexp(-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output, scores.softmax(-1) @ value, atol=1e-5, rtol=1e-5)


def test_in_bf16_the_joined_softmax_keeps_to_a_float32_one():
    generator = torch.Generator().manual_seed(3)
    batch, heads, kv_heads, slots, dim = 4, 6, 2, 9, 16
    query = torch.randn(batch, heads, 1, dim, generator=generator)
    key, value = (torch.randn(batch, kv_heads, slots, dim, generator=generator) for _ in range(2))
    sees = torch.rand(batch, 1, slots, generator=generator) < 0.5
    sees[:, :, 0] = True
    prefix_keys, prefix_values = (torch.randn(kv_heads, 7, dim, generator=generator) for _ in range(2))
    bf16 = [tensor.bfloat16() for tensor in (query, key, value, prefix_keys, prefix_values)]
    ours, _ = shared_prefix_attention(
        SimpleNamespace(layer_idx=0),
        *bf16[:3],
        sees[:, None],
        0.25,
        shared_prefix=SharedPrefix((bf16[3],), (bf16[4],)),
    )
    expected = naive_attention(*[t.float() for t in bf16[:3]], sees, bf16[3].float(), bf16[4].float(), 0.25)
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), expected, atol=2e-2, rtol=2e-2)
