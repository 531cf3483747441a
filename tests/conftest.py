"""Shared fixtures: a character-level tokenizer and a tiny random Llama, both built in code."""

from __future__ import annotations

import string

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]


@pytest.fixture(scope="session")
def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character; pads on the left."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + list(dict.fromkeys(string.printable)))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


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


def stream_llama(tokenizer: PreTrainedTokenizerFast, eos_logit: float = 2.0) -> LlamaForCausalLM:
    """A tiny Llama that ignores its input: a large bias in the last MLP pins the final hidden state,
    so it emits i.i.d. characters and eos with probability about e^eos_logit / (e^eos_logit + V):
    Setter streams finish many short puzzles. It saves and loads like any Llama (bias in config)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, mlp_bias=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    direction = torch.ones(config.hidden_size)
    with torch.no_grad():
        model.model.layers[-1].mlp.down_proj.bias.copy_(100 * direction)  # final RMS norm then gives ~ones
        model.lm_head.weight[tokenizer.eos_token_id] = eos_logit * direction / config.hidden_size
    return model
