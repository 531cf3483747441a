"""The Setter's rewards as pure functions of numbers: difficulty, novelty and their combination."""

from codeplay_lightning.rewards.functions import (
    NOVELTY_NEIGHBOURS,
    Combine,
    DifficultyReward,
    difficulty_reward,
    novelty_reward,
    pass_rate,
    total_reward,
)

__all__ = [
    "NOVELTY_NEIGHBOURS",
    "Combine",
    "DifficultyReward",
    "difficulty_reward",
    "novelty_reward",
    "pass_rate",
    "total_reward",
]
