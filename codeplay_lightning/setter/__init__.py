"""Training the Setter: the iteration's steps as plain functions (`rollout`), the Lightning parts that
run them (`RolloutCallback`, `ArchiveDataModule`) and the PPO module that learns from them."""

from codeplay_lightning.setter.datamodule import ArchiveDataModule
from codeplay_lightning.setter.module import SetterPPOModule, ValueHead
from codeplay_lightning.setter.rollout import build_buffer
from codeplay_lightning.setter.rollout_callback import RolloutCallback

__all__ = ["ArchiveDataModule", "RolloutCallback", "SetterPPOModule", "ValueHead", "build_buffer"]
