"""PPO scoring: per-token log-probs, values and entropies of right-padded actions after one shared prompt.

Two paths, chosen by `architectures.attention_paths`, both equal to one full forward per row over the prompt and
that row's actions, gradient included (`tests/unit/models/test_model_matrix_scoring.py`):
- packed (fast): the prompt runs once, at batch 1, and the rows' actions run behind it packed into equally full
  sequences, each token attending to the prompt and its own row's earlier actions under a 4D mask. Exact only
  where attention is plain causal over positions: a window would count pack slots, not distances;
- rows (plain): each row is its own sequence, prompt + actions, under an ordinary 2D padding mask, so every
  token sits at its own position whatever the attention; the prompt then runs once per row.
Either way the vocabulary projection runs at real actions only, in chunks (`head_logprobs_and_entropy`): the
model returns hidden states, never the (N, V) logits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface, DynamicCache

from codeplay_lightning.models.architectures import attention_paths, using_attention
from codeplay_lightning.models.head import head_logprobs_and_entropy

PACK_TOKENS = 256  # action tokens per packed sequence in scoring (a longer row gets a pack of its own): 12% faster
# than 512 on 2 cores (1,375 tokens behind a 287-token prompt), since a pack's tokens attend to each other
GROUPED_ATTENTION = "codeplay_grouped_sdpa"


def score_actions(
    model: nn.Module,
    prompt_ids: torch.Tensor,
    action_ids: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    value_head: Callable[[torch.Tensor], torch.Tensor] | None = None,
    pack_tokens: int = PACK_TOKENS,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Log-probs, values V(s_t) and entropies of right-padded actions (B, T) after the shared prompt (P,),
    each (B, T), 0 at padding. Log-probs and entropies are those of the sampling distribution (logits divided
    by `temperature`), so the entropy bonus and metric are at that temperature too. `value_head` maps the last
    hidden states (N, H) before the actions to values (N,); None scores without values (the reference model).
    `pack_tokens`: about how many action tokens a pack holds on the packed path. `recompute`: each pack (each
    row on the plain path) runs apart and keeps nothing for the backward, which runs its forward again: the
    backward then holds one pack's activations at a time, for one more forward pass."""
    real = mask.bool()  # (B, T)
    projection = vocabulary_projection(model)
    if attention_paths(model).fast:
        hidden, source = _packed_states(model, prompt_ids, action_ids, real, pack_tokens, recompute)
    else:
        hidden, source = _row_states(model, prompt_ids, action_ids, real, recompute)
    targets = torch.zeros(len(hidden), dtype=torch.long, device=mask.device)  # (N,): what each state predicts
    targets[source[real]] = action_ids[real]
    per_state = list(head_logprobs_and_entropy(hidden, projection.weight, projection.bias, targets, temperature))
    if value_head is not None:
        per_state.append(value_head(hidden))
    logprobs, entropies, *values = (torch.where(real, at_state[source], 0.0) for at_state in per_state)
    return logprobs, values[0] if values else None, entropies


def vocabulary_projection(model: nn.Module) -> nn.Linear:
    """The model's output layer, which scoring applies to the hidden states itself; one-line refusal if it is
    anything but a plain `nn.Linear` (LoRA on it, for one), whose logits no test here has checked."""
    projection = model.get_output_embeddings()
    if type(projection) is not nn.Linear:
        raise ValueError(
            f"PPO scoring projects hidden states onto the vocabulary itself and needs a plain nn.Linear output "
            f"layer; this model's is {type(projection).__name__} (LoRA on the output layer is not supported)"
        )
    return projection


def _row_states(
    model: nn.Module, prompt_ids: torch.Tensor, action_ids: torch.Tensor, real: torch.Tensor, recompute: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The last hidden states (N, H) before the N real actions, in row-major order, and the (B, T) index of each
    action's state: one forward over every row's [prompt | actions], right-padded (`recompute`: one per row)."""
    batch, prompt_length = real.shape[0], len(prompt_ids)
    ids = torch.cat([prompt_ids.expand(batch, -1), action_ids], dim=1)  # (B, P + T)
    attention = torch.cat([real.new_ones(batch, prompt_length), real], dim=1)  # (B, P + T)
    before = torch.zeros_like(attention)  # (B, P + T): the state at p predicts the token at p + 1
    before[:, prompt_length - 1 : -1] = real

    def last_states(rows: slice) -> torch.Tensor:  # (rows, P + T, H)
        output = model(
            input_ids=ids[rows],
            attention_mask=attention[rows],
            use_cache=False,
            output_hidden_states=True,
            logits_to_keep=1,
        )
        return output.hidden_states[-1]

    states = _in_parts(last_states, batch, recompute)
    source = torch.zeros(real.shape, dtype=torch.long, device=real.device)
    source[real] = torch.arange(int(real.sum()), device=real.device)
    return states[before], source


def _packed_states(
    model: nn.Module,
    prompt_ids: torch.Tensor,
    action_ids: torch.Tensor,
    real: torch.Tensor,
    pack_tokens: int,
    recompute: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The last hidden states (N, H) before the actions, and the (B, T) index of each action's state. The prompt
    runs once, at batch 1; the rows' actions run behind it in packs of about `pack_tokens` tokens, each token
    attending to the prompt and to its own row's earlier actions only. The prompt's keys and values depend on
    the weights and stay in the graph; padding only at the ends of packs. Packs, not one sequence: attention's
    work grows with the pack's length times the prompt's plus its own. The packs run together, or (`recompute`)
    one at a time, each recomputed in the backward."""
    batch = len(action_ids)
    prompt = model(input_ids=prompt_ids[None], use_cache=True, output_hidden_states=True, logits_to_keep=1)
    # a row's first action is predicted by the prompt's last position, its others by its actions but the
    # last: states are the B first-action ones (the prompt's, repeated), then the Q packed ones
    hidden = [prompt.hidden_states[-1][0, -1:].expand(batch, -1)]  # (B, H)
    lengths = real.sum(dim=1)  # (B,)
    feeds = torch.arange(real.shape[1], device=real.device) < (lengths - 1)[:, None]  # (B, T)
    if feeds.any():
        counts = (lengths - 1).clamp(min=0)  # (B,) fed tokens per row
        fed = counts.tolist()
        row_packs, row_offsets = (
            torch.tensor(column, device=real.device)  # (B,) each
            for column in pack_rows(fed, balanced_budget(fed, pack_tokens))
        )
        n_packs, pack_length = int(row_packs[-1]) + 1, int((row_offsets + counts).max())
        positions = feeds.long().cumsum(dim=1)[feeds] - 1  # (Q,): each fed token's place in its row
        segments = torch.arange(batch, device=real.device).repeat_interleave(counts)  # (Q,)
        slots = (row_packs * pack_length + row_offsets)[segments] + positions  # (Q,) in G * L
        packed = {
            name: torch.full((n_packs * pack_length,), fill, dtype=torch.long, device=real.device)
            .index_put_((slots,), values)
            .view(n_packs, pack_length)
            for name, fill, values in (
                ("ids", 0, action_ids[feeds]),
                ("positions", 0, positions),
                ("segments", -1, segments),
            )
        }
        prompt_states = [(layer.keys, layer.values) for layer in prompt.cache.layers]  # each (1, H_kv, P, D)

        def pack_states(packs: slice) -> torch.Tensor:  # (packs, L, H)
            ids = packed["ids"][packs]
            # the prompt's keys and values behind every pack: a cache of its own, since the model appends to it
            cache = DynamicCache(
                [
                    (keys.expand(len(ids), -1, -1, -1), values.expand(len(ids), -1, -1, -1))
                    for keys, values in prompt_states
                ]
            )
            with using_attention(model, GROUPED_ATTENTION):
                rows = model(
                    input_ids=ids,
                    cache=cache,
                    position_ids=len(prompt_ids) + packed["positions"][packs],
                    output_hidden_states=True,
                    logits_to_keep=1,
                    attention_mask=packed_attention_mask(
                        packed["segments"][packs], packed["positions"][packs], len(prompt_ids)
                    ),
                )
            return rows.hidden_states[-1]

        hidden.append(_in_parts(pack_states, n_packs, recompute).flatten(0, 1)[slots])  # (Q, H)
    predicted = torch.zeros_like(feeds)  # (B, T): the real actions after each row's first
    predicted[:, 1:] = feeds[:, :-1]
    source = torch.zeros(real.shape, dtype=torch.long, device=real.device)
    source[:, 0] = torch.arange(batch, device=real.device)
    source[predicted] = torch.arange(batch, batch + int(predicted.sum()), device=real.device)
    return torch.cat(hidden), source


def _in_parts(forward: Callable[[slice], torch.Tensor], parts: int, recompute: bool) -> torch.Tensor:
    """`forward` of a slice of the batch, over all `parts` of it at once; with `recompute`, one part at a time,
    each keeping nothing for the backward, which runs it again (non-reentrant checkpointing)."""
    if not recompute:
        return forward(slice(None))
    return torch.cat([checkpoint(forward, slice(part, part + 1), use_reentrant=False) for part in range(parts)])


def pack_rows(counts: list[int], budget: int) -> tuple[list[int], list[int]]:
    """(pack, offset in it) of each row, in row order: consecutive rows share a pack while their
    tokens (`counts`) fit in `budget`; a longer row has a pack of its own."""
    packs, offsets = [], []
    pack, used = -1, budget + 1
    for count in counts:
        if used + count > budget:
            pack, used = pack + 1, 0
        packs.append(pack)
        offsets.append(used)
        used += count
    return packs, offsets


def balanced_budget(counts: list[int], most: int) -> int:
    """A budget that packs `counts` into no more packs than `most` does, with the fullest pack as
    empty as it can be: padding every pack to the fullest then wastes little (850 tokens under 512:
    two packs of about 425, not 512 and 338)."""
    n_packs = pack_rows(counts, most)[0][-1] + 1
    budget = -(-sum(counts) // n_packs)  # ceil
    while pack_rows(counts, budget)[0][-1] + 1 > n_packs:  # at most max(counts) raises
        budget += 1
    return budget


def packed_attention_mask(segments: torch.Tensor, positions: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """(G, 1, L, P + L) boolean mask for G packs of L tokens behind a P-token cached prompt: token q sees the
    prompt and the tokens of its own segment (row) up to itself; padding (segment -1) sees the prompt only."""
    same_row = (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] >= 0)  # (G, L, L)
    causal = positions[:, None, :] <= positions[:, :, None]
    prompt = same_row.new_ones(*segments.shape, prompt_length)  # (G, L, P)
    return torch.cat([prompt, same_row & causal], dim=2)[:, None]


def grouped_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SDPA with each key/value head read by its group of query heads (`enable_gqa`) on the CPU: Transformers'
    own copies the keys and values once per query head whenever a mask is given, and autograd kept those copies
    (SmolLM2's 3 heads made 9: 290 MB of a CPU-scale minibatch). Elsewhere the heads are copied, as Transformers
    does: on CUDA a mask with `enable_gqa` sends SDPA to its math kernel. query (B, H, q, D); key and value
    (B, H_kv, S, D)."""
    return _packed_sdpa(query, key, value, attention_mask, dropout, scaling, share_heads=query.device.type == "cpu")


def _packed_sdpa(query, key, value, attention_mask, dropout, scaling, *, share_heads: bool):
    if not share_heads:  # query head h reads key/value head h // G
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=share_heads
    )
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_ATTENTION, grouped_sdpa_attention)
