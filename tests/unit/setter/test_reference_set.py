"""The reference set R_n's distances are normalised by: P3's train split when the reward names P3's files (its test
split never: it is for evaluation only), else our corpus's training families; the normaliser is their mean pairwise
cosine distance."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pytest
from support import FIXTURES, CharEmbedder

from codeplay_lightning.config import RewardConfig
from codeplay_lightning.corpus import reference_puzzles
from codeplay_lightning.setter.rollout import reference_set

P3 = FIXTURES / "p3_small"


class RecordingEmbedder(CharEmbedder):
    """`CharEmbedder`, keeping every text it was given."""

    def __init__(self):
        self.texts: list[str] = []

    def encode(self, texts, **options) -> np.ndarray:
        self.texts += texts
        return super().encode(texts, **options)


def naive_mean_distance(vectors: np.ndarray) -> float:
    return float(np.mean([1 - float(np.dot(a, b)) for a, b in combinations(vectors.astype(np.float64), 2)]))


def test_p3s_reference_is_its_train_split_and_never_its_test_split():
    embedder = RecordingEmbedder()
    reward = RewardConfig(reference=str(P3 / "puzzles.json"), reference_split=str(P3 / "split.json"))
    embeddings, distance = reference_set(embedder, reward)

    split = json.loads((P3 / "split.json").read_text())
    entries = json.loads((P3 / "puzzles.json").read_text())
    as_f = {entry["name"]: entry["sat"].replace("def sat(", "def f(", 1) for entry in entries}
    train = [f for name, f in as_f.items() if name.split(":")[0] in split["train"]]
    test = [f for name, f in as_f.items() if name.split(":")[0] in split["test"]]
    assert len(train) == 4 and len(test) == 3  # Greeting has two instances
    assert embedder.texts == train and not set(test) & set(embedder.texts)
    np.testing.assert_array_equal(embeddings, CharEmbedder().encode(train))
    assert distance == pytest.approx(naive_mean_distance(embeddings), abs=1e-6)


def test_without_p3s_files_the_reference_is_our_corpuss_training_families():
    embedder = RecordingEmbedder()
    embeddings, distance = reference_set(embedder, RewardConfig())
    assert embedder.texts == [puzzle.f for puzzle in reference_puzzles()]
    assert embeddings.shape == (len(embedder.texts), embedder.get_embedding_dimension())
    assert distance == pytest.approx(naive_mean_distance(embeddings), abs=1e-6)
