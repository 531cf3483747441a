"""The one collective the Setter loop needs outside Lightning: every rank's object, in rank order."""

from __future__ import annotations

import torch.distributed as dist


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if _distributed() else 0


def from_every_rank(obj) -> list:
    """`[obj]` in one process; under DDP every rank's `obj` (all ranks must call this together)."""
    if not _distributed():
        return [obj]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, obj)
    return everyone
