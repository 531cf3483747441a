"""Shared fixtures: the sandbox, a character-level tokenizer and a tiny random Llama (built in code,
see `support.py`), and a stand-in for the model loader of the commands."""

from __future__ import annotations

import pytest
import torch
from support import build_char_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from codeplay_lightning.execution import Sandbox


@pytest.fixture(scope="session")
def sandbox():
    """Two wardens with a 1 s timeout, shared by every test that judges programs."""
    with Sandbox(workers=2, timeout=1.0) as box:
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


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: a second thread's OpenMP barriers cost more than its work, up to 100 times more while
    other processes keep the cores busy (7.8 s against 0.06 s for a test measured so)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
