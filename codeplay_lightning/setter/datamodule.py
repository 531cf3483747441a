"""`BufferDataModule`: serves each iteration's PPO buffer, which the rollout callback fills.

The dataloader has a fixed length, `ppo_epochs × n_minibatches` minibatches, known before the
rollout that fills the buffer (Lightning sizes the epoch first) and equal on every DDP rank.
Each PPO epoch is a fresh permutation of the buffer cut into `n_minibatches` parts. The first
epoch's is drawn before the rollout scores the buffer, which it scores in exactly those minibatches
(`build_buffer`); the sampler serves them from the buffer, then draws the other epochs' as before:
the generator gives the same permutations in the same order, the first one only sooner.
"""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from codeplay_lightning.config import PPOConfig
from codeplay_lightning.setter.ranks import from_every_rank, rank
from codeplay_lightning.setter.rollout import PPOBuffer


class BufferDataModule(L.LightningDataModule):
    def __init__(self, *, ppo: PPOConfig, seed: int):
        super().__init__()
        self.ppo = ppo
        self._buffer: PPOBuffer | None = None
        self.shuffle = torch.Generator().manual_seed(seed)

    @property
    def buffer(self) -> PPOBuffer | None:
        """The iteration's buffer, which the dataloader serves; None before the first `set_buffer`."""
        return self._buffer

    def set_buffer(self, buffer: PPOBuffer) -> None:
        """The rollout's buffer for the iteration starting, with its first epoch's minibatches."""
        self._buffer = buffer

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Minibatches(self), batch_size=None, sampler=_MinibatchRows(self))

    def draw_epoch(self, size: int) -> list[torch.Tensor]:
        """One PPO epoch's minibatches (buffer rows) over a buffer of `size` rows: a fresh permutation cut
        into `n_minibatches` parts. The rollout draws the first epoch's to score the buffer in."""
        return list(torch.tensor_split(torch.randperm(size, generator=self.shuffle), self.ppo.n_minibatches))

    def state_dict(self) -> dict:
        # every rank's shuffle state in rank order (Lightning calls this on every rank, saves rank 0's
        # dict): the ranks' buffers differ in size, so their generators advance differently
        return {"shuffle": from_every_rank(self.shuffle.get_state())}

    def load_state_dict(self, state: dict) -> None:
        if rank() < len(state["shuffle"]):  # a rank the checkpoint did not have keeps the seed's state
            self.shuffle.set_state(state["shuffle"][rank()])


class _MinibatchRows(Sampler):
    """Yields one tensor of buffer rows per minibatch; reads the buffer when iterated."""

    def __init__(self, data: BufferDataModule):
        self.data = data

    def __len__(self) -> int:
        return self.data.ppo.ppo_epochs * self.data.ppo.n_minibatches

    def __iter__(self):
        buffer = self.data.buffer
        yield from buffer.first_epoch_minibatches  # the minibatches the rollout scored the buffer in
        for _ in range(1, self.data.ppo.ppo_epochs):
            yield from self.data.draw_epoch(len(buffer))


class _Minibatches(Dataset):
    def __init__(self, data: BufferDataModule):
        self.data = data

    def __getitem__(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.data.buffer.minibatch(rows)
