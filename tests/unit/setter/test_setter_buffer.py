"""`build_buffer` scores the buffer in exactly the first PPO epoch's minibatches, so that under bf16 the old
log-probs and values are bit for bit those the first epoch's training forward computes while the weights are
unchanged (PPO's ratio exactly 1); the sampler serves those minibatches, then reshuffles as before."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import SingleDeviceStrategy
from support import random_puzzles

from codeplay_lightning.config import PPOConfig, TrainConfig
from codeplay_lightning.setter import BufferDataModule, SetterPPOModule, build_buffer
from codeplay_lightning.setter.rollout import rank_share
from codeplay_lightning.setter.rollout_callback import rollout_precision

LENGTHS = [3, 17, 1, 40, 9, 26, 5, 12, 33, 2, 21]  # actions per puzzle: packs of several rows, and rows alone


def test_the_old_logprobs_are_the_first_epochs_bit_for_bit_under_bf16(tiny_llama):
    config = TrainConfig(ppo=PPOConfig(n_minibatches=3, ppo_epochs=2, kl_coef=0.1))
    torch.manual_seed(1)  # the value head's initialisation
    frozen = copy.deepcopy(tiny_llama).requires_grad_(False).to(torch.bfloat16)
    module = SetterPPOModule(
        policy=copy.deepcopy(tiny_llama),
        frozen=frozen,
        ppo=config.ppo,
        temperature=0.8,
        value_hidden=16,
        detach_value_trunk=True,
        identity={},
    )
    module._trainer = SimpleNamespace(strategy=SingleDeviceStrategy(torch.device("cpu")), world_size=1)
    data = BufferDataModule(ppo=config.ppo, seed=0)
    episodes, scored = random_puzzles(LENGTHS)
    prompt_ids = torch.randint(3, 90, (30,), generator=torch.Generator().manual_seed(1))
    precision = MixedPrecision("bf16-mixed", "cpu")

    first_epoch = data.draw_epoch(len(episodes))
    with torch.no_grad(), rollout_precision(precision):  # as the rollout scores
        buffer, _ = build_buffer(module, prompt_ids, episodes, scored, config, first_epoch)
    data.set_buffer(buffer)
    minibatches = list(data.train_dataloader())
    assert len(minibatches) == 2 * 3
    for batch in minibatches[:3]:  # the first epoch, scored with gradient as its training steps score it
        with precision.forward_context():
            logprobs, values, _ = module.score(batch["prompt_ids"], batch["action_ids"], batch["mask"])
        assert torch.equal(logprobs.detach(), batch["old_logprobs"])
        assert torch.equal(values.detach().float(), batch["old_values"])

    shuffle = torch.Generator().manual_seed(0)  # the sampler drew what it drew before, in the same order
    assert torch.equal(torch.cat(first_epoch), torch.randperm(len(episodes), generator=shuffle))
    torch.randperm(len(episodes), generator=shuffle)  # the second epoch's
    assert torch.equal(data.shuffle.get_state(), shuffle.get_state())


@pytest.mark.parametrize("total, world_size", [(64, 4), (8, 3), (2, 2), (3, 8)])
def test_n_envs_counts_the_streams_of_all_devices(total, world_size):
    shares = [rank_share(total, rank, world_size) for rank in range(world_size)]
    assert sum(shares) == total and max(shares) - min(shares) <= 1


@pytest.mark.parametrize("precision, dtype", [("bf16-mixed", torch.bfloat16), ("32-true", None)])
def test_the_rollout_keeps_the_trainers_precision_with_the_cast_cache_on(precision, dtype):
    from lightning.pytorch.plugins.precision import MixedPrecision, Precision

    from codeplay_lightning.setter.rollout_callback import rollout_precision

    plugin = MixedPrecision(precision, "cpu") if dtype else Precision()
    with rollout_precision(plugin):
        assert torch.is_autocast_enabled("cpu") == (dtype is not None)
        if dtype:
            assert torch.get_autocast_dtype("cpu") == dtype and torch.is_autocast_cache_enabled()
