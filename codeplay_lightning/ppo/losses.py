"""PPO maths for a token-level MDP, as pure tensor functions on padded batches.

State s_t = prompt + the first t generated tokens, action a_t = token t. Every (B, T) tensor is
aligned with the actions; `mask` (float or bool, (B, T)) is 1 at real action tokens and 0 at
padding. Real tokens need not be contiguous (left or right padding both work). Padding never
changes a result: inputs at padding are replaced by 0 before use, (B, T) outputs are 0 there, and
gradients at padding are exactly 0. Means are token-level: over all real tokens of the batch.

Under DDP each rank holds a batch of its own. The whitening and explained-variance moments take
`sum_over_ranks` (an all-reduce sum; the default is one process), so that every rank gets the moments of
all ranks' tokens together, as one process holding them all would. The losses take `tokens`, the
divisor of their token sums: all ranks' real tokens over the world size makes DDP's average of the
ranks' gradients the gradient of the mean over all ranks' tokens, however unevenly the ranks hold them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F

KLKind = Literal["k1", "k3"]
SumOverRanks = Callable[[torch.Tensor], torch.Tensor]  # a tensor summed over every DDP rank's copy of it


def one_process(tensor: torch.Tensor) -> torch.Tensor:
    """`SumOverRanks` without DDP: the one rank's tensor is the sum."""
    return tensor


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of x over real tokens, a scalar."""
    return torch.where(mask.bool(), x, 0.0).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of x over real tokens, a scalar; no real tokens gives 0, not NaN. `tokens` divides the sum in
    place of this batch's real-token count: under DDP, all ranks' real tokens over the world size (see the
    module docstring)."""
    count = mask.to(x.dtype).sum().clamp(min=1) if tokens is None else tokens
    return masked_sum(x, mask) / count


def masked_moments(
    x: torch.Tensor, mask: torch.Tensor, sum_over_ranks: SumOverRanks = one_process
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, unbiased variance) of x over the real tokens of every rank's batch, each a scalar. Two passes
    (the mean, then the squared deviations from it), not sum and sum of squares: no cancellation. With
    fewer than 2 real tokens in all, the variance is 0."""
    count, total = sum_over_ranks(torch.stack([mask.to(x.dtype).sum(), masked_sum(x, mask)]))
    mean = total / count.clamp(min=1)
    variance = sum_over_ranks(masked_sum((x - mean) ** 2, mask)) / (count - 1).clamp(min=1)
    return mean, variance


def logprobs_and_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(logits / temperature) at `tokens`, and the entropy -sum_v p_v log p_v of that softmax.
    Score at the sampling temperature, or PPO's ratio is wrong.

    logits (..., V) predict tokens (...), e.g. (B, T, V) and (B, T); both results are (...), computed in
    float32 (or float64) even for bf16 logits. One log-softmax serves both: its backward is one fused
    kernel, where logsumexp's is several passes over the vocabulary.
    """
    log_probs = _tempered_log_softmax(logits, temperature)  # (..., V)
    entropy = -(log_probs.exp() * log_probs).sum(-1)  # (...)
    return log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1), entropy


def _tempered_log_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature) in float32 at least, (..., V)."""
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, dim=-1)


HEAD_CHUNK_ROWS = 256  # rows of logits at a time in `head_logprobs_and_entropy`: 48 MB of float32 at 49,152 tokens


def head_logprobs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    chunk_rows: int = HEAD_CHUNK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`logprobs_and_entropy(F.linear(hidden, weight, bias), tokens, temperature)` for hidden states (N, H), the
    vocabulary projection's weight (V, H) and bias (V,) or None, and tokens (N,), without holding the (N, V)
    logits: rows go through in chunks of `chunk_rows`, and the backward computes each chunk's logits again
    instead of keeping them. The vocabulary-wide tensors of a PPO minibatch (the logits, their float32 copy,
    log-softmax, probabilities, their gradients) were 1.0 GiB of the peak of a CPU-scale iteration (8.63 against
    7.59 GiB, the same puzzles); the price is one more vocabulary projection per backward. Under autocast the
    projection runs in autocast's dtype, as the model's own does."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
    else:
        dtype = torch.promote_types(hidden.dtype, weight.dtype)
    return _ChunkedHead.apply(hidden, weight, bias, tokens, temperature, chunk_rows, dtype)


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype) -> torch.Tensor:
    return F.linear(hidden.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))


class _ChunkedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, chunk_rows, dtype):
        ctx.set_materialize_grads(False)  # an output outside the loss (the entropy, as a metric) gets None
        ctx.save_for_backward(hidden, weight, bias, tokens)
        ctx.temperature, ctx.chunk_rows, ctx.dtype = temperature, chunk_rows, dtype
        weight_in_dtype = weight.to(dtype)  # once, not once per chunk (the vocabulary's weight: 28M of 135M)
        with torch.autocast(hidden.device.type, enabled=False):
            chunks = [
                logprobs_and_entropy(_chunk_logits(rows, weight_in_dtype, bias, dtype), targets, temperature)
                for rows, targets in zip(hidden.split(chunk_rows), tokens.split(chunk_rows))
            ]
        return torch.cat([logprobs for logprobs, _ in chunks]), torch.cat([entropy for _, entropy in chunks])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logprobs, grad_entropy):
        """With u = logits / T, p = softmax(u), l = log p and H = -sum p l: d l_t / d u = onehot(t) - p and
        d H / d u = -p (l + H); d / d logits is that over T."""
        hidden, weight, bias, tokens = ctx.saved_tensors
        wants_hidden, wants_weight, wants_bias = ctx.needs_input_grad[:3]
        accumulate = torch.promote_types(weight.dtype, torch.float32)  # the chunks' sum, float32 under bf16
        grads = {
            "hidden": torch.zeros_like(hidden) if wants_hidden else None,
            "weight": torch.zeros_like(weight, dtype=accumulate) if wants_weight else None,
            "bias": torch.zeros_like(bias, dtype=accumulate) if wants_bias else None,
        }
        if grad_logprobs is None and grad_entropy is None:
            return grads["hidden"], grads["weight"], grads["bias"], None, None, None, None
        weight_in_dtype = weight.to(ctx.dtype)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, len(hidden), ctx.chunk_rows):
                rows = slice(start, start + ctx.chunk_rows)
                logits = _chunk_logits(hidden[rows], weight_in_dtype, bias, ctx.dtype)
                log_probs = _tempered_log_softmax(logits, ctx.temperature)
                probs = log_probs.exp()  # (n, V)
                grad_u = torch.zeros_like(probs)
                if grad_entropy is not None:
                    entropy = -(probs * log_probs).sum(-1, keepdim=True)  # (n, 1)
                    grad_u -= grad_entropy[rows, None] * probs * (log_probs + entropy)
                if grad_logprobs is not None:
                    grad_u -= grad_logprobs[rows, None] * probs
                    grad_u.scatter_add_(-1, tokens[rows, None], grad_logprobs[rows, None].to(grad_u.dtype))
                grad_logits = (grad_u / ctx.temperature).to(ctx.dtype)  # (n, V)
                if wants_hidden:
                    grads["hidden"][rows] = grad_logits @ weight_in_dtype
                if wants_weight:
                    grads["weight"] += grad_logits.T @ hidden[rows].to(ctx.dtype)
                if wants_bias:
                    grads["bias"] += grad_logits.sum(0)
        grad_weight = None if grads["weight"] is None else grads["weight"].to(weight.dtype)
        grad_bias = None if grads["bias"] is None else grads["bias"].to(bias.dtype)
        return grads["hidden"], grad_weight, grad_bias, None, None, None, None


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: KLKind = "k1") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled token's log-probs, (B, T).

    k1 = log p - log p_ref: unbiased, can be negative per token.
    k3 = (r - 1) - log r with r = p_ref / p: unbiased, always >= 0, lower variance.
    """
    if kind == "k1":
        return logprobs - ref_logprobs
    if kind == "k3":
        log_r = ref_logprobs - logprobs
        return torch.expm1(log_r) - log_r  # expm1(x) = e^x - 1, exact near r = 1
    raise ValueError(f"kind must be 'k1' or 'k3', got {kind!r}")


@torch.no_grad()
def token_rewards(
    scores: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
    kind: KLKind = "k1",
) -> torch.Tensor:
    """Per-token rewards (B, T): -kl_coef * the KL penalty at every real token, plus the sequence score (B,)
    on each row's last real token. A row without real tokens gets no reward (its score is dropped)."""
    real = mask.bool()  # (B, T)
    kl = torch.where(real, kl_penalty(logprobs, ref_logprobs, kind), 0.0)  # (B, T)
    positions = torch.arange(mask.shape[1], device=mask.device)  # (T,)
    last_index = torch.where(real, positions, -1).argmax(dim=1)  # (B,) position of the last real token
    is_last = F.one_hot(last_index, mask.shape[1]).bool() & real  # (B, T); all False for empty rows
    return -kl_coef * kl + torch.where(is_last, scores.to(kl.dtype).unsqueeze(1), 0.0)  # (B, T)


@torch.no_grad()
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's real tokens -> (advantages, returns), (B, T).

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t);  A_t = delta_t + gamma * lam * A_{t+1};  R_t = A_t + V(s_t).
    values[:, t] = V(s_t), the value before action t. Padding is skipped: t+1 is the next real token.
    After a row's last real token, V(s_T) = 0: every row is a finished puzzle (puzzles cut by the step
    budget are not trained on), so it is terminal.
    """
    real = mask.bool()  # (B, T)
    next_value = torch.zeros_like(values[:, 0])  # (B,) V(s_{t+1})
    next_advantage = torch.zeros_like(values[:, 0])  # (B,) A_{t+1}
    advantages = []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        advantage = delta + gamma * lam * next_advantage  # (B,)
        advantages.append(torch.where(real[:, t], advantage, 0.0))
        next_value = torch.where(real[:, t], values[:, t], next_value)  # padding carries the values through
        next_advantage = torch.where(real[:, t], advantage, next_advantage)
    advantages = torch.stack(advantages[::-1], dim=1)  # (B, T)
    returns = torch.where(real, advantages + values, 0.0)  # (B, T)
    return advantages, returns


def whiten(values: torch.Tensor, mask: torch.Tensor, sum_over_ranks: SumOverRanks = one_process) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over all real tokens of every rank's batch, 0 at padding. var is unbiased
    (divides by n - 1, like torch.var; 0 below 2 tokens: `masked_moments`)."""
    mean, var = masked_moments(values, mask, sum_over_ranks)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)  # (B, T)
    return torch.where(mask.bool(), whitened, 0.0)


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, sum_over_ranks: SumOverRanks = one_process
) -> torch.Tensor:
    """1 - Var[returns - values] / Var[returns] over all real tokens of every rank's batch, a scalar: 1 when
    the value head predicts the returns exactly, 0 when it does no better than their mean, negative when
    worse. NaN when the returns do not vary (nothing to explain)."""
    returns_variance = masked_moments(returns, mask, sum_over_ranks)[1]
    error_variance = masked_moments(returns - values, mask, sum_over_ranks)[1]
    return torch.where(returns_variance > 0, 1 - error_variance / returns_variance, torch.nan)


class PolicyLoss(NamedTuple):
    pg_loss: torch.Tensor  # scalar, differentiable in logprobs
    approx_kl: torch.Tensor  # scalar, detached: estimate of KL(old || new), k3 form
    clip_frac: torch.Tensor  # scalar, detached: fraction of real tokens with |ratio - 1| > clip_range


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float,
    tokens: torch.Tensor | None = None,
) -> PolicyLoss:
    """PPO's clipped surrogate, to minimise: masked_mean(max(-A * ratio, -A * clip(ratio, 1 ± clip))).
    `tokens`: the divisor of every token sum, as in `masked_mean` (approx_kl and clip_frac too, so that
    averaging them over the ranks gives their means over all ranks' tokens)."""
    logratio = torch.where(mask.bool(), logprobs - old_logprobs, 0.0)  # (B, T); 0 at padding, so exp is safe
    ratio = logratio.exp()  # (B, T)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_range, 1 + clip_range)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mask, tokens=tokens)
    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1) - logratio, mask, tokens=tokens)
        clip_frac = masked_mean(((ratio - 1).abs() > clip_range).float(), mask, tokens=tokens)
    return PolicyLoss(pg_loss, approx_kl, clip_frac)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range_value: float | None,
    tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """0.5 * masked_mean(max((v - R)^2, (clip(v, v_old ± c) - R)^2)); clip_range_value=None: unclipped.
    `tokens`: the divisor of the token sum, as in `masked_mean`."""
    v_loss_unclipped = (values - returns) ** 2  # (B, T)
    if clip_range_value is None:
        return 0.5 * masked_mean(v_loss_unclipped, mask, tokens=tokens)
    v_clipped = old_values + torch.clamp(values - old_values, -clip_range_value, clip_range_value)
    v_loss_clipped = (v_clipped - returns) ** 2  # (B, T)
    return 0.5 * masked_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask, tokens=tokens)
