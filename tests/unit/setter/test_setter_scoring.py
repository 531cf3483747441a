"""`SetterPPOModule.score` is a thin call into `models.scoring` (checked against a full forward per row on
every model architecture in test_model_matrix_scoring.py): here, what the module adds (its value head, the trunk
detached or not, the reference model without values) and the packing of rows."""

from __future__ import annotations

import copy

import pytest
import torch

from codeplay_lightning.config import PPOConfig
from codeplay_lightning.models.scoring import balanced_budget, pack_rows
from codeplay_lightning.setter import SetterPPOModule

TEMPERATURE = 0.7


def new_module(model, detach_value_trunk: bool) -> SetterPPOModule:
    torch.manual_seed(1)  # the value head's initialisation
    return SetterPPOModule(
        policy=copy.deepcopy(model),
        frozen=None,
        ppo=PPOConfig(),
        temperature=TEMPERATURE,
        value_hidden=16,
        detach_value_trunk=detach_value_trunk,
        identity={},
    )


@pytest.mark.parametrize("detach_value_trunk", [True, False])
def test_values_train_the_trunk_unless_it_is_detached(tiny_llama, detach_value_trunk):
    module = new_module(tiny_llama, detach_value_trunk)
    prompt_ids, action_ids = torch.arange(3, 15), torch.arange(4, 10).view(2, 3)
    values = module.score(prompt_ids, action_ids, torch.tensor([[1.0, 1, 1], [1, 0, 0]]))[1]
    trunk = [parameter for name, parameter in module.policy.named_parameters() if "embed_tokens" in name]
    head = list(module.value_head.parameters())
    grads = torch.autograd.grad(values.sum(), trunk + head, allow_unused=True)
    assert all(grad is not None and grad.abs().sum() > 0 for grad in grads[len(trunk) :])
    assert all((grad is None) == detach_value_trunk for grad in grads[: len(trunk)])


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
