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
