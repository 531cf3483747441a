"""Shared fixtures: a character-level tokenizer and a tiny random Llama, both built in code; three
puzzles and an LLM answer function that the Solver tests share."""

from __future__ import annotations

import string

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from codeplay_lightning.execution import Sandbox
from codeplay_lightning.puzzles import Puzzle

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]


@pytest.fixture(scope="session")
def sandbox():
    """Two wardens with a 1 s timeout, shared by every test that judges programs."""
    with Sandbox(workers=2, timeout=1.0) as box:
        yield box


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


SEVEN = Puzzle("seven", "def f(x: int):\n    return x == 7", ans_type="int")
NEGATIVE_ROOT = Puzzle("negative_root", "def f(n: int):\n    return n * n == 144 and n < 0", ans_type="int")
GOOD_MORNING = Puzzle("good_morning", 'def f(s: str):\n    return "Good " + s == "Good morning"', ans_type="str")


def answer_by_puzzle(prompt: str) -> str:
    """An LLM's answer by the puzzle in the prompt alone (so a search's completions do not depend on its
    neighbours in a batch): SEVEN is solved by the first generate; NEGATIVE_ROOT's generate raises and
    a fix solves it; every answer to GOOD_MORNING is wrong."""
    rewrite = prompt.endswith("## What went wrong\n")  # improve / fix, not generate
    if SEVEN.f in prompt:
        return "    return 7\n```"
    if NEGATIVE_ROOT.f in prompt:
        return "```python\ndef g():\n    return -12\n```" if rewrite else "    return 1 // 0\n```"
    return "```python\ndef g():\n    return 'night'\n```" if rewrite else "    return 'evening'\n```"
