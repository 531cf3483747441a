"""The novelty archive against exact numpy search on random unit vectors."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from codeplay_lightning.archive import NoveltyArchive, reference_mean_distance
from codeplay_lightning.archive.novelty import INITIAL_CAPACITY

DIM = 32


def unit_vectors(rng: np.random.Generator, count: int, dim: int = DIM) -> np.ndarray:
    vectors = rng.standard_normal((count, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)  # (count, dim)


def exact_nearest(archive: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    distances = 1 - queries.astype(np.float64) @ archive.astype(np.float64).T  # (Q, N)
    return np.sort(distances, axis=1)[:, :k]


def filled_archive(embeddings: np.ndarray) -> NoveltyArchive:
    archive = NoveltyArchive(embeddings.shape[1])
    archive.add([f"puzzle {index}" for index in range(len(embeddings))], embeddings)
    return archive


@pytest.mark.parametrize("size", [1, 3, 5, 300])
def test_nearest_matches_exact_search_on_a_small_archive(size):
    rng = np.random.default_rng(size)
    stored, queries = unit_vectors(rng, size), unit_vectors(rng, 50)
    distances = filled_archive(stored).nearest(queries)
    assert distances.shape == (50, min(5, size))  # k = 5 by default, fewer when fewer are archived
    np.testing.assert_allclose(distances, exact_nearest(stored, queries, 5), atol=1e-5)


def test_an_empty_archive_has_no_neighbours():
    archive = NoveltyArchive(DIM)
    assert len(archive) == 0
    assert archive.nearest(unit_vectors(np.random.default_rng(0), 4)).shape == (4, 0)


def test_recall_at_20k():
    # Uniform random vectors in many dimensions are the worst case for any graph index (every
    # distance is about 1); embeddings are far from uniform. 16 dimensions keep the test meaningful.
    rng = np.random.default_rng(0)
    stored, queries = unit_vectors(rng, 20_000, dim=16), unit_vectors(rng, 500, dim=16)
    found, exact = filled_archive(stored).nearest(queries), exact_nearest(stored, queries, 5)  # (500, 5) each
    recall = np.mean(found <= exact[:, -1:] + 1e-5)  # a neighbour found is a true one if within the 5th
    assert recall >= 0.95
    reward_error = found.mean(axis=1) - exact.mean(axis=1)  # (500,)
    assert np.abs(reward_error).mean() < 1e-3  # the mean 5-NN distance is what the novelty reward uses


def test_the_archive_grows_past_its_initial_capacity():
    rng = np.random.default_rng(1)
    batches = [unit_vectors(rng, INITIAL_CAPACITY // 2 + 100) for _ in range(5)]  # 2.5 × the initial capacity
    archive = NoveltyArchive(DIM)
    for batch_index, batch in enumerate(batches):
        archive.add([f"{batch_index}-{row}" for row in range(len(batch))], batch)
    stored, queries = np.concatenate(batches), unit_vectors(rng, 50)
    assert len(archive) == len(stored) == len(archive.texts)
    assert archive.texts[-1] == f"4-{len(batches[-1]) - 1}"
    np.testing.assert_array_equal(archive.state_dict()["embeddings"].numpy(), stored)
    # Resizing keeps the graph: it answers exactly as an archive built in one go.
    np.testing.assert_array_equal(archive.nearest(queries), filled_archive(stored).nearest(queries))
    error = archive.nearest(queries) - exact_nearest(stored, queries, 5)  # (50, 5)
    assert np.abs(error).mean() < 1e-3


@pytest.mark.parametrize("archived", [0, 2, 200])
def test_score_and_add_equals_scoring_and_adding_one_puzzle_at_a_time(archived):
    rng = np.random.default_rng(archived)
    stored, batch = unit_vectors(rng, archived), unit_vectors(rng, 12)
    batch[5] = batch[4] = batch[1]  # repeats within the batch: only the first copy is novel
    texts = [f"new {index}" for index in range(len(batch))]
    batched, one_by_one = filled_archive(stored), filled_archive(stored)

    scores = batched.score_and_add(texts, batch)
    expected = []
    for text, embedding in zip(texts, batch):
        expected.append(one_by_one.nearest(embedding[None])[0])
        one_by_one.add([text], embedding[None])

    assert [len(score) for score in scores] == [len(distances) for distances in expected]
    for score, distances in zip(scores, expected):
        np.testing.assert_allclose(score, distances, atol=1e-5)
    assert scores[4][0] == pytest.approx(0, abs=1e-6) and scores[5][:2] == pytest.approx([0, 0], abs=1e-6)
    assert batched.texts == one_by_one.texts and len(batched) == archived + len(batch)
    if archived == 0:
        assert len(scores[0]) == 0 and len(scores[3]) == 3  # the first puzzle of a run is compared with nothing


def test_state_dict_round_trip_through_torch_load_weights_only():
    rng = np.random.default_rng(2)
    archive, queries = filled_archive(unit_vectors(rng, 1500)), unit_vectors(rng, 100)
    buffer = io.BytesIO()
    torch.save({"archive": archive.state_dict()}, buffer)  # as inside a Lightning checkpoint
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["archive"]

    restored = NoveltyArchive(DIM)
    restored.add(["to be replaced"], unit_vectors(rng, 1))
    restored.load_state_dict(state)
    assert restored.texts == archive.texts and len(restored) == 1500
    np.testing.assert_array_equal(restored.nearest(queries), archive.nearest(queries))  # the same graph


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda state: {"texts": state["texts"]}, "must have the keys"),
        (lambda state: {**state, "embeddings": state["embeddings"][:, :16]}, r"shape \(N, 32\)"),
        (lambda state: {**state, "texts": state["texts"][:-1]}, "9 texts but 10 embeddings"),
        (lambda state: {**state, "embeddings": 2 * state["embeddings"]}, "L2-normalised"),
    ],
)
def test_a_bad_state_is_rejected_and_leaves_the_archive_unchanged(change, message):
    archive = filled_archive(unit_vectors(np.random.default_rng(3), 10))
    with pytest.raises(ValueError, match=message):
        archive.load_state_dict(change(archive.state_dict()))
    assert len(archive) == 10


def test_bad_additions_are_rejected():
    rng = np.random.default_rng(4)
    archive = NoveltyArchive(DIM)
    with pytest.raises(ValueError, match=r"shape \(N, 32\)"):
        archive.add(["a"], unit_vectors(rng, 1, dim=8))
    with pytest.raises(ValueError, match="2 texts but 1 embeddings"):
        archive.add(["a", "b"], unit_vectors(rng, 1))
    with pytest.raises(ValueError, match="L2-normalised"):
        archive.add(["a"], np.full((1, DIM), np.nan, dtype=np.float32))
    assert len(archive) == 0


def test_reference_mean_distance_matches_the_mean_over_pairs():
    embeddings = unit_vectors(np.random.default_rng(5), 40)
    pairs = [1 - float(embeddings[i] @ embeddings[j]) for i in range(40) for j in range(i + 1, 40)]
    assert reference_mean_distance(embeddings) == pytest.approx(np.mean(pairs), abs=1e-6)
    assert reference_mean_distance(embeddings[[0, 0]]) == pytest.approx(0, abs=1e-6)  # identical puzzles
    with pytest.raises(ValueError, match="N ≥ 2"):
        reference_mean_distance(embeddings[:1])
    with pytest.raises(ValueError, match="L2-normalised"):
        reference_mean_distance(2 * embeddings)
