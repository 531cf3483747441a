"""Training the Setter: the iteration's steps as plain functions (`rollout`, `selfplay`), the Lightning parts that
run them (`RolloutCallback`, `BufferDataModule`), the PPO module that learns from them, and the run's records
(`records`)."""

from codeplay_lightning.setter.datamodule import BufferDataModule
from codeplay_lightning.setter.module import SetterPPOModule, ValueHead
from codeplay_lightning.setter.rollout import build_buffer
from codeplay_lightning.setter.rollout_callback import RolloutCallback

__all__ = ["BufferDataModule", "RolloutCallback", "SetterPPOModule", "ValueHead", "build_buffer"]
