"""Supervised fine-tuning on puzzles in the prompts' few-shot format: `codeplay sft` and `make warmstart`."""

from codeplay_lightning.sft.run import SFTConfig, fine_tune

__all__ = ["SFTConfig", "fine_tune"]
