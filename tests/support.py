"""Test support, built in code: a character-level tokenizer, a tiny Llama that streams characters,
three puzzles with an LLM answer function the Solver tests share, and `ScriptedLLM`, an LLM whose
completions a test writes; `CharEmbedder`, a sentence embedder; `markdown_table`, the rows of a table in the docs a
test checks."""

from __future__ import annotations

import re
import string
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from codeplay_lightning.llm import LLMUsage
from codeplay_lightning.models.sampling import SamplingConfig, pick_tokens
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.setter.rollout import Episode, ScoredPuzzle

REPO = Path(__file__).resolve().parents[1]
# where the model matrix runs: the CPU everywhere, a CUDA device where there is one (the `gpu` tests)
DEVICES = ("cpu", pytest.param("cuda", marks=pytest.mark.gpu))
CONFIGS = REPO / "configs"  # the presets, for load_config
FIXTURES = REPO / "tests" / "fixtures"
SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
TURNS_CHAT_TEMPLATE = (  # for the char tokenizer: every turn ends with its eos token, as SmolLM2's with <|im_end|>
    "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}<eos>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character; pads on the left."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + list(dict.fromkeys(string.printable)))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def stream_llama(tokenizer: PreTrainedTokenizerFast, eos_logit: float = 2.0) -> LlamaForCausalLM:
    """A tiny Llama that ignores its input: a large bias in the last MLP pins the final hidden state,
    so it emits i.i.d. characters and eos with probability about e^eos_logit / (e^eos_logit + V):
    Setter streams finish many short puzzles. It saves and loads like any Llama (bias in config)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        mlp_bias=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
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


class ScriptedLLM:
    """For tests: returns scripted completions in order (raising when the script runs out), or, given a
    function, answers each prompt by it. Records every prompt and the size of every batch. Tokens are
    counted as whitespace-separated words (there is no tokenizer here)."""

    def __init__(self, script: Iterable[str] | Callable[[str], str]):
        self.answer = script if callable(script) else None
        self.script: list[str] = [] if callable(script) else list(script)
        self.prompts: list[str] = []
        self.batches: list[int] = []
        self.usage = LLMUsage()

    def complete(self, prompts: list[str]) -> list[str]:
        started = time.perf_counter()
        if self.answer is not None:
            self.script += [self.answer(prompt) for prompt in prompts]
        if len(self.prompts) + len(prompts) > len(self.script):
            raise RuntimeError(f"ScriptedLLM: script of {len(self.script)} completions exhausted")
        completions = self.script[len(self.prompts) : len(self.prompts) + len(prompts)]
        self.prompts.extend(prompts)
        self.batches.append(len(prompts))
        self.usage.calls += len(prompts)
        self.usage.prompt_tokens += sum(len(prompt.split()) for prompt in prompts)
        self.usage.completion_tokens += sum(len(completion.split()) for completion in completions)
        self.usage.seconds += time.perf_counter() - started
        return completions


def generators(seeds: list[int]) -> list[torch.Generator]:
    """One seeded CPU generator per seed: what makes a sampled row reproducible whatever its batch."""
    return [torch.Generator().manual_seed(seed) for seed in seeds]


def reference_logprobs(model, tokenizer, prompt: str, token_ids: torch.Tensor, temperature: float):
    """log_softmax(logits / T) at each generated token from one unpadded forward over prompt + tokens, on the
    model's device; returned on the CPU, as the samplers return theirs."""
    prompt_ids = tokenizer(prompt, return_tensors="pt")["input_ids"][0]  # (P,)
    sequence = torch.cat([prompt_ids, token_ids])[None].to(model.device)  # (1, P + n)
    with torch.no_grad():
        logits = model(input_ids=sequence).logits[0, len(prompt_ids) - 1 : -1].float().cpu()  # (n, V)
    logprobs = torch.log_softmax(logits / (temperature or 1.0), dim=-1)  # (n, V)
    return logprobs.gather(-1, token_ids[:, None]).squeeze(-1)  # (n,)


def stream_alone(model, tokenizer, prompt: str, n_steps: int, config: SamplingConfig, seed: int):
    """The naive reference for one stream: a full forward over prompt + open continuation per token."""
    generator = torch.Generator().manual_seed(seed)
    prompt_ids = tokenizer(prompt, return_tensors="pt")["input_ids"][0]
    pieces, open_ids, open_logprobs = [], [], []
    for _ in range(n_steps):
        sequence = torch.cat([prompt_ids, torch.tensor(open_ids, dtype=torch.long)])[None].to(model.device)
        with torch.no_grad():
            logits = model(input_ids=sequence).logits.cpu()
        token, logprob = pick_tokens(
            logits[:, -1].float(), config.temperature, config.top_p, torch.rand(1, generator=generator), config.top_k
        )
        open_ids.append(int(token))
        open_logprobs.append(float(logprob))
        text = tokenizer.decode(open_ids)
        if open_ids[-1] == tokenizer.eos_token_id or any(stop in text for stop in config.stop_strings):
            pieces.append((open_ids, open_logprobs, True))
            open_ids, open_logprobs = [], []
    return pieces + ([(open_ids, open_logprobs, False)] if open_ids else [])


def scalar_values(run_dir) -> dict[str, list[float]]:
    """Every scalar a run logged to TensorBoard, by tag, in logging order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = run_dir.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    return {tag: [event.value for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def random_puzzles(lengths: list[int], seed: int = 0) -> tuple[list[Episode], list[ScoredPuzzle]]:
    """Puzzles of random action ids, `lengths[i]` for puzzle i, each valid with a random reward, as the rollout
    hands them to `build_buffer` (their sampler log-probs are 0: no sampler wrote them)."""
    generator = torch.Generator().manual_seed(seed)
    episodes = [
        Episode(f"puzzle {row}", torch.randint(3, 90, (length,), generator=generator), torch.zeros(length))
        for row, length in enumerate(lengths)
    ]
    rewards = torch.randn(len(lengths), generator=generator).tolist()
    return episodes, [
        ScoredPuzzle(
            text=episode.text,
            valid=True,
            reason="",
            passes=1,
            difficulty=2.0,
            r_difficulty=reward,
            r_novelty=0.0,
            reward=reward,
        )
        for episode, reward in zip(episodes, rewards)
    ]


def markdown_table(text: str, first_header: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first markdown table in `text` whose header's first cell is
    `first_header`."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if line.startswith("|") and _cells(line)[0] == first_header:
            rows = []
            for row in lines[start + 2 :]:  # after the header and its |---| line
                if not row.startswith("|"):
                    break
                rows.append(_cells(row))
            return rows
    raise AssertionError(f"no table with first header {first_header!r}")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


class CharEmbedder:
    """A sentence embedder built in code: each text's counts of the printable characters (plus one), normalised."""

    def get_embedding_dimension(self) -> int:
        return len(string.printable)

    def encode(self, texts, **_) -> np.ndarray:
        counts = [Counter(text) for text in texts]
        vectors = np.array([[1 + count[c] for c in string.printable] for count in counts], dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
