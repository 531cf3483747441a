"""Token picking: one token per batch row from its logits, at a temperature, within top-k and top-p, drawn by
inverse CDF from one uniform per row (each row's own generator, or the global RNG), with its log-prob.
"""

from __future__ import annotations

import torch


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
