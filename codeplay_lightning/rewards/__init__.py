"""The Setter's rewards as pure functions of numbers: difficulty, novelty and their combination."""

from codeplay_lightning.rewards.functions import (
    NOVELTY_NEIGHBOURS,
    Combine,
    difficulty_reward,
    novelty_reward,
    total_reward,
)

__all__ = ["NOVELTY_NEIGHBOURS", "Combine", "difficulty_reward", "novelty_reward", "total_reward"]
