"""The one collective the Setter loop needs outside Lightning: every rank's object, in rank order; what the
ranks share through it, their puzzles for the novelty archive; and what a collective raises when a rank is gone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch.distributed as dist


def distributed() -> bool:
    """Whether this process is a rank of a process group (a build without torch.distributed never is)."""
    return dist.is_available() and dist.is_initialized()


class RankLost(ConnectionError):
    """A collective failed because another rank (a node, a process) died or stopped answering within
    `trainer.collective_timeout`: one line that says so, in place of the backend's traceback."""


# what a collective raises when a peer is gone: gloo's and NCCL's errors, and the timeouts of both and of the store
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "timed out", "Timed out", "NCCL", "timeout")


def peer_lost(error: BaseException) -> bool:
    return isinstance(error, dist.DistError) or any(mark in str(error) for mark in PEER_LOST)


def rank() -> int:
    return dist.get_rank() if distributed() else 0


def from_every_rank(obj) -> list:
    """`[obj]` in one process; under DDP every rank's `obj` (all ranks must call this together)."""
    if not distributed():
        return [obj]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, obj)
    return everyone


@dataclass(frozen=True)
class RankPuzzles:
    """One rank's puzzles and their embeddings, which every rank archives."""

    texts: list[str]
    embeddings: np.ndarray  # (N, D)


def gather_puzzles(texts: Sequence[str], embeddings: np.ndarray) -> tuple[list[str], np.ndarray, int]:
    """`novelty_distances`'s `gather`: all ranks' puzzles and embeddings in rank order, and where this rank's begin."""
    everyone: list[RankPuzzles] = from_every_rank(RankPuzzles(list(texts), embeddings))
    offset = sum(len(puzzles.texts) for puzzles in everyone[: rank()])
    return (
        [text for puzzles in everyone for text in puzzles.texts],
        np.concatenate([puzzles.embeddings for puzzles in everyone]),
        offset,
    )
