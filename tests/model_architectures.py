"""Tiny random models of every architecture the training loop accepts, built in code: the model matrix that the
sampling and scoring tests check against one plain full forward per row. Each has 2 layers, 32 wide. The
windowed ones (GPT-Neo's local layer, Qwen2's and Mistral's sliding window) have a window of 8 tokens, shorter
than the tests' prompts, so a window counted in the wrong slots would show."""

from __future__ import annotations

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoConfig,
    GPTNeoForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PhiConfig,
    PhiForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

WINDOW = 8


def _common(tokenizer: PreTrainedTokenizerFast, initializer_range: float) -> dict:
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.eos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "initializer_range": initializer_range,
    }


def _llama(tokenizer, positions, init):
    return LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=positions,
            **_common(tokenizer, init),
        )
    )


def _gpt2(tokenizer, positions, init):
    return GPT2LMHeadModel(
        GPT2Config(
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **_common(tokenizer, init),
        )
    )


def _gpt_neo(tokenizer, positions, init):  # the paper's architecture: a global and a local layer, as GPT-Neo-125M
    return GPTNeoForCausalLM(
        GPTNeoConfig(
            hidden_size=32,
            num_layers=2,
            num_heads=4,
            intermediate_size=64,
            attention_types=[[["global", "local"], 1]],
            window_size=WINDOW,
            max_position_embeddings=positions,
            embed_dropout=0.0,
            attention_dropout=0.0,
            resid_dropout=0.0,
            **_common(tokenizer, init),
        )
    )


def _gpt_neox(tokenizer, positions, init):  # Pythia's architecture: partial rotary, parallel residual
    return GPTNeoXForCausalLM(
        GPTNeoXConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            rotary_pct=0.25,
            max_position_embeddings=positions,
            **_common(tokenizer, init),
        )
    )


def _phi(tokenizer, positions, init):
    return PhiForCausalLM(
        PhiConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            partial_rotary_factor=0.5,
            max_position_embeddings=positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attention_dropout=0.0,
            **_common(tokenizer, init),
        )
    )


def _qwen2(tokenizer, positions, init):  # a sliding window on every layer
    return Qwen2ForCausalLM(
        Qwen2Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window=WINDOW,
            max_window_layers=0,
            max_position_embeddings=positions,
            **_common(tokenizer, init),
        )
    )


def _mistral(tokenizer, positions, init):
    return MistralForCausalLM(
        MistralConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=WINDOW,
            max_position_embeddings=positions,
            **_common(tokenizer, init),
        )
    )


BUILDERS = {
    "llama": _llama,
    "gpt2": _gpt2,
    "gpt_neo": _gpt_neo,
    "gpt_neox": _gpt_neox,
    "phi": _phi,
    "qwen2": _qwen2,
    "mistral": _mistral,
}
ARCHITECTURES = tuple(BUILDERS)


def tiny_model(
    architecture: str,
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    positions: int = 512,
    initializer_range: float = 0.5,
) -> PreTrainedModel:
    """A tiny random model of `architecture` (a key of BUILDERS) in eval mode, the same for the same seed. The default
    large initial weights give peaked next-token distributions, like a trained LM's; 0.02 (the usual) gives
    nearly uniform ones, which end puzzles (eos) about once in a hundred tokens."""
    torch.manual_seed(seed)
    return BUILDERS[architecture](tokenizer, positions, initializer_range).eval()
