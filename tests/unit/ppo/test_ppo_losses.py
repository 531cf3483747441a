"""PPO maths against the slowest obvious references: plain Python loops over rows and real tokens."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch.testing import assert_close

from codeplay_lightning.models.head import head_logprobs_and_entropy, logprobs_and_entropy
from codeplay_lightning.ppo import losses
from codeplay_lightning.ppo.losses import (
    explained_variance,
    gae,
    kl_penalty,
    masked_mean,
    policy_loss,
    token_rewards,
    value_loss,
    whiten,
)

B, T, V = 6, 7, 5
LAYOUTS = ["right", "left", "holes"]


def make_mask(layout: str, seed: int = 0) -> torch.Tensor:
    """(B, T) float mask; row 0 has no real token, row 1 one, row 2 no padding, the rest random."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [0, 1, T] + torch.randint(1, T, (B - 3,), generator=generator).tolist()
    mask = torch.zeros(B, T, dtype=torch.float64)
    for row, length in enumerate(lengths):
        if layout == "right":
            mask[row, :length] = 1
        elif layout == "left":
            mask[row, T - length :] = 1
        else:  # real tokens anywhere in the row
            mask[row, torch.randperm(T, generator=generator)[:length]] = 1
    return mask


def real_positions(mask: torch.Tensor) -> list[list[int]]:
    return [[t for t in range(mask.shape[1]) if mask[b, t] > 0] for b in range(mask.shape[0])]


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def garbage_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x with every padding position (of the (B, T) mask) replaced by large, finite numbers."""
    padding = (mask == 0).reshape(mask.shape + (1,) * (x.dim() - 2))
    return torch.where(padding, 1e4 * (2 * torch.rand(x.shape, dtype=x.dtype) - 1), x)


# ---- references ----------------------------------------------------------------------------------


def ref_masked_mean(x, mask) -> float:
    real = [x[b][t] for b, row in enumerate(real_positions(mask)) for t in row]
    return sum(real) / len(real)


def ref_kl(logp: float, ref_logp: float, kind: str) -> float:
    if kind == "k1":
        return logp - ref_logp
    r = math.exp(ref_logp - logp)
    return (r - 1) - math.log(r)


def ref_gae(rewards, values, mask, gamma, lam):
    advantages, returns = torch.zeros(B, T, dtype=torch.float64), torch.zeros(B, T, dtype=torch.float64)
    for b, row in enumerate(real_positions(mask)):
        next_value, next_advantage = 0.0, 0.0  # after the last real token: terminal
        for t in reversed(row):
            delta = float(rewards[b, t]) + gamma * next_value - float(values[b, t])
            next_advantage = delta + gamma * lam * next_advantage
            next_value = float(values[b, t])
            advantages[b, t], returns[b, t] = next_advantage, next_advantage + next_value
    return advantages, returns


def ref_variance(real: list[float]) -> tuple[float, float]:
    """(mean, unbiased variance) of a list."""
    mean = sum(real) / len(real)
    return mean, sum((v - mean) ** 2 for v in real) / (len(real) - 1)


def ref_whiten(x, mask) -> torch.Tensor:
    mean, variance = ref_variance([float(x[b, t]) for b, row in enumerate(real_positions(mask)) for t in row])
    expected = torch.zeros(x.shape, dtype=torch.float64)
    for b, row in enumerate(real_positions(mask)):
        for t in row:
            expected[b, t] = (float(x[b, t]) - mean) / math.sqrt(variance + 1e-8)
    return expected


def ref_entropy(logits_row) -> float:
    top = max(logits_row)
    z = sum(math.exp(logit - top) for logit in logits_row)
    probs = [math.exp(logit - top) / z for logit in logits_row]
    return -sum(p * math.log(p) for p in probs if p > 0)


# ---- against the references ----------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_token_rewards_match_reference(layout, kind):
    torch.manual_seed(1)
    mask, scores = make_mask(layout), randn(B)
    logprobs, ref_logprobs = -randn(B, T).abs(), -randn(B, T).abs()
    rewards = token_rewards(scores, logprobs, ref_logprobs, mask, kl_coef=0.1, kind=kind)
    expected = torch.zeros(B, T, dtype=torch.float64)
    for b, row in enumerate(real_positions(mask)):
        for t in row:
            expected[b, t] = -0.1 * ref_kl(float(logprobs[b, t]), float(ref_logprobs[b, t]), kind)
        if row:
            expected[b, max(row)] += float(scores[b])
    assert_close(rewards, expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_matches_reference(layout, gamma, lam):
    torch.manual_seed(2)
    mask, rewards, values = make_mask(layout), randn(B, T), randn(B, T)
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    expected_advantages, expected_returns = ref_gae(rewards, values, mask, gamma, lam)
    assert_close(advantages, expected_advantages)
    assert_close(returns, expected_returns)


def test_gae_with_lambda_and_gamma_one_is_reward_to_go_minus_value():
    torch.manual_seed(3)
    mask, rewards, values = make_mask("right"), randn(B, T), randn(B, T)
    advantages, returns = gae(rewards * mask, values, mask, gamma=1.0, lam=1.0)
    reward_to_go = (rewards * mask).flip(1).cumsum(1).flip(1) * mask  # sum_{t' >= t} r_t'
    assert_close(returns, reward_to_go)
    assert_close(advantages, (reward_to_go - values) * mask)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_whiten_matches_reference(layout):
    torch.manual_seed(4)
    mask, x = make_mask(layout), 3 + 2 * randn(B, T)
    whitened = whiten(x, mask)
    assert_close(whitened, ref_whiten(x, mask))
    real_whitened = whitened[mask.bool()]
    assert_close(real_whitened.mean().item(), 0.0, atol=1e-6, rtol=0)
    assert_close(real_whitened.std().item(), 1.0, atol=1e-6, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_policy_loss_matches_reference(layout):
    torch.manual_seed(5)
    mask, advantages, clip = make_mask(layout), randn(B, T), 0.2
    old_logprobs = -randn(B, T).abs()
    logprobs = old_logprobs + 0.3 * randn(B, T)
    out = policy_loss(logprobs, old_logprobs, advantages, mask, clip)
    pg, kl, clipped = [[0.0] * T for _ in range(B)], [[0.0] * T for _ in range(B)], [[0.0] * T for _ in range(B)]
    for b, row in enumerate(real_positions(mask)):
        for t in row:
            logratio = float(logprobs[b, t] - old_logprobs[b, t])
            ratio, a = math.exp(logratio), float(advantages[b, t])
            pg[b][t] = max(-a * ratio, -a * min(max(ratio, 1 - clip), 1 + clip))
            kl[b][t] = (ratio - 1) - logratio
            clipped[b][t] = float(abs(ratio - 1) > clip)
    assert_close(out.pg_loss.item(), ref_masked_mean(pg, mask))
    assert_close(out.approx_kl.item(), ref_masked_mean(kl, mask))
    assert_close(out.clip_frac.item(), ref_masked_mean(clipped, mask))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("clip", [None, 0.1])
def test_value_loss_matches_reference(layout, clip):
    torch.manual_seed(6)
    mask, old_values, returns = make_mask(layout), randn(B, T), randn(B, T)
    values = old_values + 0.3 * randn(B, T)
    loss = [[0.0] * T for _ in range(B)]
    for b, row in enumerate(real_positions(mask)):
        for t in row:
            v, v_old, ret = float(values[b, t]), float(old_values[b, t]), float(returns[b, t])
            loss[b][t] = (v - ret) ** 2
            if clip is not None:
                v_clipped = v_old + min(max(v - v_old, -clip), clip)
                loss[b][t] = max(loss[b][t], (v_clipped - ret) ** 2)
    assert_close(value_loss(values, old_values, returns, mask, clip).item(), 0.5 * ref_masked_mean(loss, mask))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_entropy_and_logprobs_match_reference(layout):
    torch.manual_seed(7)
    mask, logits, tokens, temperature = make_mask(layout), 5 * randn(B, T, V), torch.randint(0, V, (B, T)), 0.8
    entropy = [[ref_entropy(logits[b, t].tolist()) for t in range(T)] for b in range(B)]
    logprobs, entropies = logprobs_and_entropy(logits, tokens, temperature)
    assert_close(masked_mean(logprobs_and_entropy(logits, tokens)[1], mask).item(), ref_masked_mean(entropy, mask))
    scaled_entropy = [[ref_entropy([float(x) / temperature for x in logits[b, t]]) for t in range(T)] for b in range(B)]
    assert_close(entropies, torch.tensor(scaled_entropy, dtype=entropies.dtype))
    expected = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            scaled = [float(logit) / temperature for logit in logits[b, t]]
            expected[b, t] = scaled[tokens[b, t]] - math.log(sum(math.exp(s) for s in scaled))
    assert_close(logprobs, expected)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("in_loss", ["both", "logprobs", "entropy"])
def test_chunked_head_matches_the_plain_projection_and_its_gradients(bias, in_loss):
    """Values and every input's gradient against autograd through F.linear and `logprobs_and_entropy`, in
    float64, with chunks that do not divide the rows and a loss that weighs each output per row (or leaves one
    out, as training leaves the entropy out at entropy_coef 0)."""
    torch.manual_seed(11)
    rows, hidden_size, vocabulary, temperature = 11, 6, 13, 0.7
    inputs = [randn(rows, hidden_size), 2 * randn(vocabulary, hidden_size), randn(vocabulary) if bias else None]
    tokens = torch.randint(0, vocabulary, (rows,))
    weights = randn(2, rows)

    def loss_and_grads(compute):
        leaves = [tensor.clone().requires_grad_() if tensor is not None else None for tensor in inputs]
        logprobs, entropy = compute(*leaves)
        terms = {"logprobs": (weights[0] * logprobs).sum(), "entropy": (weights[1] * entropy).sum()}
        loss = sum(terms.values()) if in_loss == "both" else terms[in_loss]
        loss.backward()
        return [logprobs, entropy] + [leaf.grad for leaf in leaves if leaf is not None]

    def plain(hidden, weight, bias_):
        return logprobs_and_entropy(torch.nn.functional.linear(hidden, weight, bias_), tokens, temperature)

    def chunked(hidden, weight, bias_):
        return head_logprobs_and_entropy(hidden, weight, bias_, tokens, temperature, chunk_rows=4)

    for expected, got in zip(loss_and_grads(plain), loss_and_grads(chunked)):
        assert_close(got, expected)


def test_chunked_head_under_bf16_autocast_matches_the_plain_projection():
    """Under autocast both project in bf16 (the model's lm_head would); the chunks round alike, the weight's
    gradient is summed over the chunks in float32 where autograd sums it in one bf16 product."""
    torch.manual_seed(12)
    hidden, weight = torch.randn(40, 16), torch.randn(50, 16)
    tokens = torch.randint(0, 50, (40,))
    results = []
    for chunk_rows in (None, 7):
        leaves = [hidden.clone().requires_grad_(), weight.clone().requires_grad_()]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if chunk_rows is None:
                outputs = logprobs_and_entropy(torch.nn.functional.linear(*leaves), tokens, 0.8)
            else:
                outputs = head_logprobs_and_entropy(*leaves, None, tokens, 0.8, chunk_rows=chunk_rows)
        sum(output.sum() for output in outputs).backward()
        results.append([*outputs, *(leaf.grad for leaf in leaves)])
    for expected, got in zip(*results):
        assert got.dtype == expected.dtype
        assert_close(got, expected, atol=0.05, rtol=0.02)


# ---- properties ----------------------------------------------------------------------------------


def test_k3_nonnegative_both_zero_when_equal_and_both_estimate_kl():
    torch.manual_seed(8)
    logp, ref_logp = torch.log_softmax(randn(V), -1), torch.log_softmax(randn(V), -1)
    assert (kl_penalty(randn(100), randn(100), "k3") >= 0).all()
    for kind in ("k1", "k3"):
        assert_close(kl_penalty(logp, logp, kind), torch.zeros(V, dtype=torch.float64))
        # E_{x ~ p}[k(x)] is exactly KL(p || ref) >= 0, even though k1 alone can be negative
        expected_value = (logp.exp() * kl_penalty(logp, ref_logp, kind)).sum()
        assert_close(expected_value, (logp.exp() * (logp - ref_logp)).sum())
        assert expected_value > 0
    assert (kl_penalty(logp, ref_logp, "k1") < 0).any()
    with pytest.raises(ValueError, match="k2"):
        kl_penalty(logp, ref_logp, "k2")


def test_policy_loss_at_ratio_one_is_minus_mean_advantage_and_its_gradient():
    torch.manual_seed(9)
    mask, advantages = make_mask("right"), randn(B, T)
    logprobs = (-randn(B, T).abs()).requires_grad_()
    out = policy_loss(logprobs, logprobs.detach(), advantages, mask, clip_range=0.2)
    n_real = mask.sum()
    assert_close(out.pg_loss, -(advantages * mask).sum() / n_real)
    out.pg_loss.backward()
    assert_close(logprobs.grad, -advantages * mask / n_real)  # d(-A * e^(logp - logp_old)) = -A at ratio 1
    assert out.approx_kl.item() == 0 and out.clip_frac.item() == 0


def test_clip_fraction_counts_tokens_outside_the_clip_range():
    ratios = torch.tensor([[1.0, 1.1, 1.3, 0.7, 0.85, 50.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])  # the ratio of 50 is padding: not counted
    out = policy_loss(ratios.log(), torch.zeros_like(ratios), torch.ones_like(ratios), mask, clip_range=0.2)
    assert_close(out.clip_frac.item(), 2 / 5)


def test_entropy_of_uniform_logits_is_log_vocabulary_size():
    logits = torch.full((2, 3, 11), 7.0)  # float32
    assert_close(logprobs_and_entropy(logits, torch.zeros(2, 3, dtype=torch.long))[1], torch.full((2, 3), math.log(11)))


def test_masked_mean_of_no_real_token_is_zero():
    x, mask = randn(3, 4), torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 1]], dtype=torch.bool)
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0
    assert_close(masked_mean(x, mask), x[mask].mean())


def test_logprobs_in_float32_for_bf16_logits():
    logits = torch.randn(2, 3, V).to(torch.bfloat16)
    assert all(x.dtype == torch.float32 for x in logprobs_and_entropy(logits, torch.zeros(2, 3, dtype=torch.long), 0.8))


# ---- padding never changes a result, nor a gradient ----------------------------------------------

SCORE_FNS = {
    "token_rewards_k1": lambda d, m: token_rewards(d["s"], d["lp"], d["ref"], m, 0.1, "k1"),
    "token_rewards_k3": lambda d, m: token_rewards(d["s"], d["lp"], d["ref"], m, 0.1, "k3"),
    "gae": lambda d, m: gae(d["r"], d["v"], m, 0.99, 0.95),
    "whiten": lambda d, m: whiten(d["v"], m),
    "policy_loss": lambda d, m: policy_loss(d["lp"], d["old"], d["a"], m, 0.2),
    "value_loss": lambda d, m: tuple(value_loss(d["v"], d["old"], d["r"], m, c) for c in (0.2, None)),
    "entropy": lambda d, m: masked_mean(logprobs_and_entropy(d["logits"], torch.zeros(B, T, dtype=torch.long))[1], m),
    "masked_sum": lambda d, m: losses.masked_sum(d["v"], m),
}


@pytest.mark.parametrize("name", sorted(SCORE_FNS))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
def test_padding_never_changes_results_or_gradients(name, layout, mask_dtype):
    torch.manual_seed(10)
    mask = make_mask(layout)
    clean = {key: randn(B, T) for key in ("lp", "ref", "old", "a", "r", "v")}
    clean |= {"s": randn(B), "logits": randn(B, T, V)}
    dirty = {key: x if key == "s" else garbage_padding(x, mask) for key, x in clean.items()}
    results = []
    for inputs in (clean, dirty):
        inputs = {key: x.clone().requires_grad_() for key, x in inputs.items()}
        outputs = SCORE_FNS[name](inputs, mask.to(mask_dtype))
        outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
        differentiable = [o.sum() for o in outputs if o.requires_grad]
        if differentiable:
            sum(differentiable).backward()
        grads = [x.grad if x.grad is not None else torch.zeros_like(x) for x in inputs.values()]
        results.append(([o.detach() for o in outputs], grads))
    (clean_outputs, clean_grads), (dirty_outputs, dirty_grads) = results
    for clean_output, dirty_output in zip(clean_outputs, dirty_outputs):
        assert torch.isfinite(dirty_output).all()
        assert_close(dirty_output, clean_output)
    for clean_grad, dirty_grad in zip(clean_grads, dirty_grads):
        assert_close(dirty_grad, clean_grad)


# ---- DDP: several ranks against one process holding all their tokens ------------------------------

RANKS = [slice(0, 3), slice(3, B)]  # rank 0 holds rows 0-2 (0, 1 and T real tokens), rank 1 the rest


class ThreadRanks:
    """DDP ranks as threads of one process: `sum_over_ranks(rank)` is an all-reduce sum among them."""

    def __init__(self, world_size: int):
        self.world_size, self.barrier, self.slots = world_size, threading.Barrier(world_size), [None] * world_size

    def sum_over_ranks(self, rank: int):
        def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
            self.slots[rank] = tensor
            self.barrier.wait()
            total = sum(self.slots)  # the same order on every rank: the same bits
            self.barrier.wait()  # no rank overwrites its slot before every rank has summed
            return total

        return all_reduce

    def run(self, fn) -> list:
        """fn(rank, sum_over_ranks) on every rank at once; the results in rank order."""
        with ThreadPoolExecutor(self.world_size) as pool:
            return list(pool.map(lambda rank: fn(rank, self.sum_over_ranks(rank)), range(self.world_size)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_whitening_and_explained_variance_over_ranks_are_those_of_one_process(layout):
    """Each rank whitens with all ranks' moments, as one process would (naive loops over every real token)."""
    torch.manual_seed(12)
    mask, x, values = make_mask(layout), 3 + 2 * randn(B, T), randn(B, T)
    expected = ref_whiten(x, mask)
    real = real_positions(mask)
    returns = [float(x[b, t]) for b, row in enumerate(real) for t in row]
    errors = [float(x[b, t] - values[b, t]) for b, row in enumerate(real) for t in row]
    expected_explained = 1 - ref_variance(errors)[1] / ref_variance(returns)[1]

    def on_rank(rank: int, sum_over_ranks) -> tuple[torch.Tensor, torch.Tensor]:
        rows = RANKS[rank]
        return (
            whiten(x[rows], mask[rows], sum_over_ranks=sum_over_ranks),
            explained_variance(values[rows], x[rows], mask[rows], sum_over_ranks),
        )

    ranks = ThreadRanks(len(RANKS)).run(on_rank)
    assert_close(torch.cat([whitened for whitened, _ in ranks]), expected)
    for _, explained in ranks:
        assert_close(explained.item(), expected_explained)
    assert_close(explained_variance(values, x, mask).item(), expected_explained)  # one process


def test_explained_variance_is_one_for_exact_values_zero_for_constant_ones_and_nan_for_constant_returns():
    mask, returns = make_mask("right"), randn(B, T)
    assert_close(explained_variance(returns, returns, mask).item(), 1.0)
    assert_close(explained_variance(returns + 3, returns, mask).item(), 1.0)  # a variance: blind to a bias
    assert_close(explained_variance(torch.zeros_like(returns), returns, mask).item(), 0.0)
    assert math.isnan(explained_variance(randn(B, T), torch.ones(B, T, dtype=torch.float64), mask).item())


def test_ranks_token_sums_over_their_mean_token_count_average_to_one_process_gradient():
    """DDP averages the ranks' gradients. With `tokens` = all ranks' real tokens / the world size, that average
    is the gradient of the mean over all ranks' tokens (a naive loop over them), however unevenly the ranks
    hold them; with each rank's own token mean, a token of the rank with fewer counts more."""
    torch.manual_seed(13)
    mask, clip, value_coef, entropy_coef = make_mask("holes"), 0.2, 0.5, 0.01
    old_logprobs, old_values, advantages, returns = -randn(B, T).abs(), randn(B, T), randn(B, T), randn(B, T)
    entropy0 = randn(B, T).abs()
    directions = {key: randn(B, T) for key in ("lp", "v", "e")}
    theta = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)  # the weights every rank shares

    def loss(rows, tokens=None) -> torch.Tensor:
        logprobs = old_logprobs[rows] + theta * directions["lp"][rows]  # some ratios beyond the clip range
        values = old_values[rows] + theta * directions["v"][rows]
        entropies = entropy0[rows] + theta * directions["e"][rows]
        return (
            policy_loss(logprobs, old_logprobs[rows], advantages[rows], mask[rows], clip, tokens).pg_loss
            + value_coef * value_loss(values, old_values[rows], returns[rows], mask[rows], clip, tokens)
            - entropy_coef * losses.masked_mean(entropies, mask[rows], tokens=tokens)
        )

    def ddp_gradient(tokens: torch.Tensor | None) -> torch.Tensor:  # the ranks' mean, as DDP's all-reduce makes it
        return sum(torch.autograd.grad(loss(rows, tokens), theta)[0] for rows in RANKS) / len(RANKS)

    per_token = []
    for b, row in enumerate(real_positions(mask)):
        for t in row:
            ratio = torch.exp(theta * directions["lp"][b, t])  # new log-prob minus the old
            value, advantage = old_values[b, t] + theta * directions["v"][b, t], advantages[b, t]
            value_clipped = old_values[b, t] + torch.clamp(value - old_values[b, t], -clip, clip)
            value_term = torch.maximum((value - returns[b, t]) ** 2, (value_clipped - returns[b, t]) ** 2)
            entropy = entropy0[b, t] + theta * directions["e"][b, t]
            per_token.append(
                torch.maximum(-advantage * ratio, -advantage * torch.clamp(ratio, 1 - clip, 1 + clip))
                + value_coef * 0.5 * value_term
                - entropy_coef * entropy
            )
    expected = torch.autograd.grad(sum(per_token) / len(per_token), theta)[0]

    assert_close(ddp_gradient(mask.sum() / len(RANKS)), expected)
    assert not torch.isclose(ddp_gradient(None), expected)  # each rank's own token mean
