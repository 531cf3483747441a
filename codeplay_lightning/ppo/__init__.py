"""PPO for the Setter: pure tensor maths (losses.py), no Lightning and no model code."""

from codeplay_lightning.ppo.losses import (
    PolicyLoss,
    explained_variance,
    gae,
    head_logprobs_and_entropy,
    kl_penalty,
    logprobs_and_entropy,
    masked_mean,
    masked_sum,
    policy_loss,
    token_rewards,
    value_loss,
    whiten,
)

__all__ = [
    "PolicyLoss",
    "explained_variance",
    "gae",
    "head_logprobs_and_entropy",
    "kl_penalty",
    "logprobs_and_entropy",
    "masked_mean",
    "masked_sum",
    "policy_loss",
    "token_rewards",
    "value_loss",
    "whiten",
]
