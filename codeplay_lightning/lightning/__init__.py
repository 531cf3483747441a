"""The Lightning side: the PPO module, the rollout callback and the archive datamodule."""

from codeplay_lightning.lightning.datamodule import ArchiveDataModule
from codeplay_lightning.lightning.module import SetterPPOModule, ValueHead
from codeplay_lightning.lightning.rollout_callback import RolloutCallback, build_buffer

__all__ = ["ArchiveDataModule", "RolloutCallback", "SetterPPOModule", "ValueHead", "build_buffer"]
