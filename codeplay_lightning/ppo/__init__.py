"""PPO for the Setter: pure tensor maths (losses.py), no Lightning and no model code (the log-probs it takes come
from `models/head.py`)."""

from codeplay_lightning.ppo.losses import (
    PolicyLoss,
    explained_variance,
    gae,
    kl_penalty,
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
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "policy_loss",
    "token_rewards",
    "value_loss",
    "whiten",
]
