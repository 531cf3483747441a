"""The vocabulary head's log-probs and entropies of chosen tokens: from logits (`logprobs_and_entropy`), or from
hidden states projected in chunks of rows with a backward of its own (`head_logprobs_and_entropy`), so that the
(N, V) logits of a PPO minibatch are never held. `scoring.py` calls it; `ppo/` takes what it returns.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
