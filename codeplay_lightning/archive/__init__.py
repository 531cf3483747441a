"""The novelty archive: the puzzle embedder and an hnswlib index over every generated puzzle."""

from codeplay_lightning.archive.embedder import EMBEDDER_ALIAS, embed, load_embedder
from codeplay_lightning.archive.novelty import NoveltyArchive, reference_mean_distance

__all__ = ["EMBEDDER_ALIAS", "NoveltyArchive", "embed", "load_embedder", "reference_mean_distance"]
