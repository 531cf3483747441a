"""Causal LMs: loading (hub id, local directory or the embedded `smollm2-135m`) and batched sampling."""

from codeplay_lightning.config import WARMSTART_ALIAS
from codeplay_lightning.devices import mixed_precision, native_bf16
from codeplay_lightning.models.loading import EMBEDDED_ALIAS, load_causal_lm
from codeplay_lightning.models.sampling import (
    Samples,
    SamplingConfig,
    sample,
    sample_streams,
    token_consistent_prompt,
)

__all__ = [
    "EMBEDDED_ALIAS",
    "WARMSTART_ALIAS",
    "Samples",
    "SamplingConfig",
    "load_causal_lm",
    "mixed_precision",
    "native_bf16",
    "sample",
    "sample_streams",
    "token_consistent_prompt",
]
