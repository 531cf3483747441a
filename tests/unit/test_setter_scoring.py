"""The PPO scoring forward runs the shared prompt once per minibatch and the rows packed behind it; it
must give exactly what one full forward per row over prompt + actions gives: log-probs, values,
entropies and every parameter's gradient."""

from __future__ import annotations

import copy

import pytest
import torch

from codeplay_lightning.config import PPOConfig
from codeplay_lightning.setter import SetterPPOModule
from codeplay_lightning.setter import module as module_code
from codeplay_lightning.setter.module import balanced_budget, pack_rows

TEMPERATURE = 0.7


def full_prompt_score(module: SetterPPOModule, prompt_ids, action_ids, mask):
    """The naive reference: every row runs the whole prompt followed by its actions."""
    prompt = prompt_ids.expand(len(action_ids), -1)  # (B, P)
    ids = torch.cat([prompt, action_ids], dim=1)  # (B, P + T)
    attention = torch.cat([torch.ones_like(prompt, dtype=torch.float), mask], dim=1)
    output = module.policy(input_ids=ids, attention_mask=attention, output_hidden_states=True)
    start = prompt.shape[1] - 1  # the logits at position p predict token p + 1
    logits = output.logits[:, start:-1].float() / TEMPERATURE  # (B, T, V)
    hidden = output.hidden_states[-1][:, start:-1]  # (B, T, H)
    values = module.value_head(hidden.detach() if module.detach_value_trunk else hidden)
    probs = torch.softmax(logits, dim=-1)  # (B, T, V)
    logprobs = torch.log(probs.gather(-1, action_ids[..., None]).squeeze(-1))
    return tuple(x * mask for x in (logprobs, values, -(probs * torch.log(probs)).sum(-1)))


def gradients(module, scorer, prompt_ids, action_ids, mask) -> dict[str, torch.Tensor]:
    module.zero_grad(set_to_none=True)
    logprobs, values, entropies = scorer(module, prompt_ids, action_ids, mask)
    weights = torch.linspace(0.5, 1.5, mask.numel()).view_as(mask)  # every token counts differently
    ((logprobs * weights).sum() + (values * weights).sum() + (entropies * weights.flip(0)).sum()).backward()
    return {name: parameter.grad.clone() for name, parameter in module.named_parameters()}


def new_module(model, detach_value_trunk: bool, attention: str = "sdpa") -> SetterPPOModule:
    torch.manual_seed(1)  # the value head's initialisation
    model = copy.deepcopy(model)
    model.set_attn_implementation(attention)
    return SetterPPOModule(model, None, PPOConfig(), TEMPERATURE, 16, detach_value_trunk, identity={})


@pytest.mark.parametrize("pack_tokens", [256, 6])  # one pack; several, with rows longer than a pack
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("detach_value_trunk", [True, False])
@pytest.mark.parametrize("lengths", [[5, 2, 7], [1, 1], [4], [3, 1, 6, 6, 2, 9]])
def test_prompt_once_equals_full_prompt_per_row(tiny_llama, lengths, detach_value_trunk, attention, pack_tokens,
                                                monkeypatch):
    monkeypatch.setattr(module_code, "PACK_TOKENS", pack_tokens)
    module = new_module(tiny_llama, detach_value_trunk, attention)
    generator = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, 40, (23,), generator=generator)
    action_ids = torch.randint(3, 40, (len(lengths), max(lengths)), generator=generator)
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).float()  # right padding
    action_ids = action_ids * mask.long()  # padding id 0, as the buffer pads

    with torch.no_grad():
        split = module.score(prompt_ids, action_ids, mask)
        full = full_prompt_score(module, prompt_ids, action_ids, mask)
    for ours, reference in zip(split, full):  # 0 at padding, as the reference is made to be
        torch.testing.assert_close(ours, reference, atol=1e-4, rtol=1e-4)

    ours = gradients(module, lambda m, *a: m.score(*a), prompt_ids, action_ids, mask)
    reference = gradients(module, full_prompt_score, prompt_ids, action_ids, mask)
    assert ours.keys() == reference.keys()
    for name in ours:  # fp32 round-off: the prompt's gradient is summed over the rows in another order
        scale = float(reference[name].abs().max())
        torch.testing.assert_close(ours[name], reference[name], atol=1e-4 * scale, rtol=1e-4, msg=name)
    assert any(grad.abs().sum() > 0 for name, grad in ours.items() if "embed_tokens" in name)


@pytest.mark.parametrize("budget", [1, 5, 12])
def test_packs_are_consecutive_rows_within_the_budget(budget):
    counts = [3, 0, 4, 7, 1, 1, 2, 12, 5]
    packs, offsets = pack_rows(counts, budget)
    assert packs[0] == 0 and all(b - a in (0, 1) for a, b in zip(packs, packs[1:]))
    for pack in set(packs):
        rows = [row for row, p in enumerate(packs) if p == pack]
        assert [offsets[row] for row in rows] == [sum(counts[r] for r in rows[:i]) for i in range(len(rows))]
        assert sum(counts[row] for row in rows) <= budget or len(rows) == 1
        if pack + 1 in packs:  # a pack closes only when the next row would not fit
            assert sum(counts[row] for row in rows) + counts[rows[-1] + 1] > budget


@pytest.mark.parametrize("most", [1, 12, 13, 20, 50])
def test_a_balanced_budget_pads_least_with_no_more_packs(most):
    counts = [3, 0, 4, 7, 1, 1, 2, 12, 5]

    def packs_and_fullest(budget: int) -> tuple[int, int]:
        packs, offsets = pack_rows(counts, budget)
        return packs[-1] + 1, max(offset + count for offset, count in zip(offsets, counts))

    n_packs = packs_and_fullest(most)[0]
    balanced = packs_and_fullest(balanced_budget(counts, most))
    every_budget = [packs_and_fullest(budget) for budget in range(1, sum(counts) + 1)]  # naive search
    assert balanced[0] <= n_packs
    assert balanced[1] == min(fullest for packs, fullest in every_budget if packs <= n_packs)


def test_reference_scoring_has_no_values_and_matches_the_policy_scoring(tiny_llama):
    module = new_module(tiny_llama, True)
    prompt_ids, action_ids, mask = torch.arange(3, 15), torch.arange(4, 10).view(2, 3), torch.ones(2, 3)
    with torch.no_grad():
        logprobs, values, _ = module.score(prompt_ids, action_ids, mask)
        reference_logprobs, none, _ = module.score(prompt_ids, action_ids, mask, model=module.policy)
    assert none is None and values.shape == (2, 3)
    torch.testing.assert_close(reference_logprobs, logprobs)


def test_attention_that_takes_no_custom_mask_is_refused_in_one_line(tiny_llama):
    model = copy.deepcopy(tiny_llama)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="load the model with one of sdpa, eager"):
        SetterPPOModule(model, None, PPOConfig(), TEMPERATURE, 16, True, identity={})
