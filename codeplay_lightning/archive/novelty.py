"""The novelty archive: every puzzle generated so far, with an hnswlib index for its nearest
neighbours, and the reference distance that normalises the novelty reward.

Distances are cosine distances 1 − a·b between L2-normalised embeddings (hnswlib space "cosine"),
in [0, 2]. A puzzle's novelty is measured against the puzzles generated before it: the archive as
it was before the current batch, plus the batch's earlier puzzles (`score_and_add`), as if the
batch had been generated and archived one puzzle at a time. A batch of identical new puzzles
therefore counts as novel once, not once per copy.

Persistence: `state_dict` holds the texts and the embeddings, as a float32 tensor because
`torch.load(weights_only=True)` (torch's default, which Lightning's resume uses) refuses numpy
arrays; `load_state_dict` rebuilds the index from them. Insertion is single-threaded with a fixed
seed, so the rebuilt graph is the same graph and answers every query exactly as before. Rebuilding
takes under 1 ms per puzzle (40 to 75 s for 100k puzzles of 384 dims on one shared core).
"""

from __future__ import annotations

from collections.abc import Sequence

import hnswlib
import numpy as np
import torch

from codeplay_lightning.rewards import NOVELTY_NEIGHBOURS

GRAPH_DEGREE = 16  # hnswlib M: links per node; hnswlib's default
EF_CONSTRUCTION = 200  # candidate list while inserting; hnswlib's default
EF_SEARCH = 100  # candidate list while querying (≥ k): the smallest with recall@5 ≥ 0.95 in bench/archive.py
INITIAL_CAPACITY = 1024  # the index and the embedding buffer double when full
GRAPH_SEED = 0  # seeds the random levels of inserted nodes
UNIT_NORM_TOLERANCE = 1e-4


class NoveltyArchive:
    """The texts and embeddings of all archived puzzles, in insertion order, with an hnswlib index
    over the embeddings (`dim` wide). It grows without a preset maximum."""

    def __init__(self, dim: int) -> None:
        if dim < 1:
            raise ValueError(f"embedding dim must be ≥ 1, got {dim}")
        self.dim = dim
        self._clear()

    def __len__(self) -> int:
        return len(self.texts)

    def nearest(self, embeddings: np.ndarray, k: int = NOVELTY_NEIGHBOURS) -> np.ndarray:
        """Cosine distances from each of `embeddings` (N, dim) to its k nearest archived puzzles,
        ascending: shape (N, min(k, len(self)))."""
        embeddings = self._checked(embeddings)
        k = min(k, len(self))
        if k == 0:
            return np.zeros((len(embeddings), 0), dtype=np.float32)
        _, distances = self._index.knn_query(embeddings, k=k)  # (N, k); queries run on all cores
        return distances

    def add(self, texts: Sequence[str], embeddings: np.ndarray) -> None:
        """Archive `texts` with their `embeddings` (N, dim), L2-normalised."""
        embeddings = self._checked(embeddings)
        if len(texts) != len(embeddings):
            raise ValueError(f"got {len(texts)} texts but {len(embeddings)} embeddings")
        start, end = len(self), len(self) + len(texts)
        if start == end:
            return  # hnswlib rejects an empty batch
        if end > len(self._embeddings):
            capacity = max(2 * len(self._embeddings), end)
            self._index.resize_index(capacity)
            grown = np.empty((capacity, self.dim), dtype=np.float32)
            grown[:start] = self._embeddings[:start]
            self._embeddings = grown
        self._index.add_items(embeddings, np.arange(start, end), num_threads=1)  # one thread: a reproducible graph
        self._embeddings[start:end] = embeddings
        self.texts.extend(texts)

    def score_and_add(self, texts: Sequence[str], embeddings: np.ndarray) -> list[np.ndarray]:
        """Archive a batch and return, for each of its puzzles, the ascending distances to its
        (up to) 5 nearest puzzles among the archive and the batch's earlier puzzles.

        The same as `nearest` then `add` for one puzzle at a time (exactly the same where the index
        search is exact), with one index query: distances to the archive come from the index,
        distances within the batch are computed exactly.
        """
        embeddings = self._checked(embeddings)
        archive_distances = self.nearest(embeddings)  # (N, m), m = min(5, len(self))
        batch_distances = 1 - embeddings @ embeddings.T  # (N, N)
        batch_distances[np.triu_indices(len(embeddings))] = np.inf  # puzzle i sees puzzles j < i only
        candidates = np.sort(np.concatenate([archive_distances, batch_distances], axis=1), axis=1)
        counts = np.minimum(NOVELTY_NEIGHBOURS, archive_distances.shape[1] + np.arange(len(embeddings)))
        self.add(texts, embeddings)
        return [row[:count] for row, count in zip(candidates, counts)]

    def state_dict(self) -> dict:
        """`{"texts": list[str], "embeddings": float32 tensor (N, dim)}`."""
        return {"texts": list(self.texts), "embeddings": torch.from_numpy(self._embeddings[: len(self)].copy())}

    def load_state_dict(self, state: dict) -> None:
        """Replace the archive by `state` (from `state_dict`) and rebuild the index from it."""
        if set(state) != {"texts", "embeddings"}:
            raise ValueError(f"archive state must have the keys ['embeddings', 'texts'], got {sorted(state)}")
        texts, embeddings = list(state["texts"]), self._checked(state["embeddings"])
        if len(texts) != len(embeddings):
            raise ValueError(f"archive state has {len(texts)} texts but {len(embeddings)} embeddings")
        self._clear()
        self.add(texts, embeddings)

    def _clear(self) -> None:
        self.texts: list[str] = []
        self._embeddings = np.empty((INITIAL_CAPACITY, self.dim), dtype=np.float32)  # rows ≥ len(self) unused
        self._index = hnswlib.Index(space="cosine", dim=self.dim)
        self._index.init_index(
            INITIAL_CAPACITY, M=GRAPH_DEGREE, ef_construction=EF_CONSTRUCTION, random_seed=GRAPH_SEED
        )
        self._index.set_ef(EF_SEARCH)

    def _checked(self, embeddings: np.ndarray | torch.Tensor) -> np.ndarray:
        """`embeddings` as a float32 array, after checking its shape (N, dim) and unit rows."""
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[1] != self.dim:
            raise ValueError(f"embeddings must have shape (N, {self.dim}), got {embeddings.shape}")
        _require_unit_rows(embeddings)
        return embeddings


def reference_mean_distance(embeddings: np.ndarray) -> float:
    """Mean cosine distance over the distinct pairs of a reference set of L2-normalised
    `embeddings` (N, D), N ≥ 2: the novelty reward's normaliser.

    Exact in O(N·D): the sum of a·b over ordered pairs i ≠ j is |Σ e|² − Σ |e|².
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    if embeddings.ndim != 2 or len(embeddings) < 2:
        raise ValueError(f"need embeddings of shape (N ≥ 2, D), got {embeddings.shape}")
    _require_unit_rows(embeddings)
    count = len(embeddings)
    total = embeddings.sum(axis=0)  # (D,)
    pair_similarity = (total @ total - np.einsum("nd,nd->", embeddings, embeddings)) / (count * (count - 1))
    return float(1 - pair_similarity)


def _require_unit_rows(embeddings: np.ndarray) -> None:
    norms = np.linalg.norm(embeddings, axis=1)  # (N,)
    if not np.all(np.abs(norms - 1) <= UNIT_NORM_TOLERANCE):  # also rejects NaN
        raise ValueError("embeddings must be L2-normalised rows (as `embed` returns)")
