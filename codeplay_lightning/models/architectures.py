"""Which path each model takes through sampling and PPO scoring: a fast path only where a test proves it exact.

Two fast paths exist, and both need attention that is plain causal over *positions*:
- shared-prefix sampling (`shared_prefix.py`): the prompt's keys and values are held once and the rows'
  own tokens sit in a static cache, so a row's tokens are not at the slots their positions would give; the
  model must look its attention function up by name at every call, for the shared-prefix one to run;
- packed scoring (`scoring.py`): several rows' actions share one sequence behind the prompt, under a 4D mask.
A local or sliding window counts key *slots*, which then are not distances: GPT-Neo's local layers and any
configured sliding window take the plain paths, where every row holds its whole context contiguously in the
model's own cache (sampling) or its own sequence (scoring). `tests/unit/models/test_model_matrix_*.py` check every
architecture below, on both paths it may take, against one unpadded full forward per row; any other model type is
refused in one line rather than sent down a path nobody checked for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

FAST_ARCHITECTURES = ("llama", "gpt2", "gpt_neox", "phi", "qwen2", "mistral")  # fast unless a window is configured
PLAIN_ARCHITECTURES = ("gpt_neo",)  # attention classes fixed at construction, local layers: plain paths only
FAST_ATTENTION = ("sdpa", "eager")  # the loaded implementations that take a custom 4D mask


class UnsupportedModel(ValueError):
    """A model type no test has checked: refused in one line."""


@dataclass(frozen=True)
class AttentionPaths:
    architecture: str
    fast: bool  # shared-prefix sampling and packed scoring; else the plain paths


def attention_paths(model) -> AttentionPaths:
    """The paths `model` (a causal LM, possibly wrapped by PEFT) may take; raises `UnsupportedModel` for a
    architecture the model matrix does not cover."""
    config = model.config
    architecture = config.model_type
    if architecture not in FAST_ARCHITECTURES + PLAIN_ARCHITECTURES:
        raise UnsupportedModel(
            f"model type {architecture!r} was never checked against a full forward here; "
            f"supported: {', '.join(FAST_ARCHITECTURES + PLAIN_ARCHITECTURES)}"
        )
    fast = (
        architecture in FAST_ARCHITECTURES
        and not _windowed(config)
        and config._attn_implementation in FAST_ATTENTION
        and not getattr(config, "reorder_and_upcast_attn", False)
    )  # GPT-2's own eager path ignores the name
    return AttentionPaths(architecture, fast)


def _windowed(config) -> bool:
    """Does any layer attend through a local or sliding window?"""
    layer_types = getattr(config, "layer_types", None) or ()
    return getattr(config, "sliding_window", None) is not None or any(kind != "full_attention" for kind in layer_types)


@contextmanager
def using_attention(model, name: str) -> Iterator[None]:
    """The attention function registered as `name` runs the model's attention for the duration: each attention
    layer of a fast architecture looks its implementation up by the config's name at every call."""
    previous = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = previous
