"""Shared fixtures: the sandboxes (plain, and one offering numpy), a character-level tokenizer and a tiny random
Llama (built in code, see `support.py`), that Llama saved as a model directory, and a stand-in for the model loader
of the commands. Tests marked `gpu` are skipped where there is no CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support import build_char_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from codeplay_lightning.execution import Sandbox


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    no_cuda = pytest.mark.skip(reason="needs a CUDA device: benchmarks/gpu/run.sh runs it on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(no_cuda)


@pytest.fixture(scope="session")
def sandbox():
    """Two wardens with a 1 s timeout, shared by every test that judges programs."""
    with Sandbox(workers=2, timeout=1.0) as box:
        yield box


@pytest.fixture(scope="session")
def numpy_sandbox():
    """Two wardens offering numpy, for the programs of Code World Models and `Sandbox.apply`. The 30 s limit is
    room for a planner that runs a whole episode in one call; no test waits for it (timeouts are tested on
    sandboxes of their own)."""
    with Sandbox(workers=2, timeout=30.0, modules=("numpy",)) as box:
        yield box


@pytest.fixture(scope="session")
def char_tokenizer() -> PreTrainedTokenizerFast:
    return build_char_tokenizer()


@pytest.fixture(scope="session")
def tiny_llama(char_tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A 2-layer, 32-wide Llama with random weights, in eval mode."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(char_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,  # large weights: peaked next-token distributions, like a trained LM
        pad_token_id=char_tokenizer.pad_token_id,
        eos_token_id=char_tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_llama: LlamaForCausalLM, char_tokenizer: PreTrainedTokenizerFast) -> Path:
    """`tiny_llama` and its tokenizer (no chat template) saved as a local model directory, for `--llm`; read only."""
    directory = tmp_path_factory.mktemp("tiny")
    tiny_llama.save_pretrained(directory)
    char_tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture
def model_loads(monkeypatch) -> list[dict]:
    """Replaces `load_causal_lm` in `load_llm`: each call's keyword arguments are recorded, then the command
    stops with a ValueError (exit status 2), before any model loads."""
    from codeplay_lightning.llm import backends

    loads: list[dict] = []

    def load(spec: str, **kwargs) -> None:
        loads.append(kwargs)
        raise ValueError("stopped where the model loads")

    monkeypatch.setattr(backends, "load_causal_lm", load)
    return loads
