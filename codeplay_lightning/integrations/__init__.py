"""Codeplay's rewards for other trainers: reward functions in TRL's form (`docs/integrations.md`)."""

from codeplay_lightning.integrations.trl import P3Reward, SetterReward

__all__ = ["P3Reward", "SetterReward"]
