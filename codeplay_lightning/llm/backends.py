"""LLM backends for the search: a local Hugging Face causal LM, or any OpenAI-compatible server.

`load_llm("openai:http://127.0.0.1:8000/v1#smollm2", ...)` talks to a server (vLLM, llama.cpp's, a
hosted API); any other spec names a model `load_causal_lm` accepts, sampled here in batches.
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from codeplay_lightning.llm.interface import LLMUsage
from codeplay_lightning.models.loading import load_causal_lm
from codeplay_lightning.models.sampling import SamplingConfig, sample

OPENAI_PREFIX = "openai:"
MAX_API_STOP_STRINGS = 4  # the OpenAI API rejects requests with more
# KV-cache slots the batch may hold: rows x (longest prompt after the prefix all share + max_new_tokens). One long
# prompt (P3's test split has a 7k-token puzzle) would otherwise give 32 rows its length: over 19 GiB and 10
# minutes on 2 cores; a Solver's row holds a few hundred slots. 1.5 GiB of bf16 cache for SmolLM2-135M.
MAX_BATCH_SLOTS = 65_536


def chat_text(tokenizer: PreTrainedTokenizerBase, prompt: str) -> str:
    """`prompt` as a single user message through the tokenizer's chat template, up to the assistant's turn."""
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class HFLLM:
    """A local causal LM sampled with `models.sampling.sample`, `batch_size` rows at a time (continuous batching:
    a finished row takes the next prompt), in at most `MAX_BATCH_SLOTS` KV-cache slots.

    `chat=True` sends each prompt as a single user message through the tokenizer's chat template;
    `chat=False` continues the raw prompt; `chat=None` decides: chat exactly when the tokenizer has
    a template. `generator` makes completions reproducible and
    independent of `batch_size`: it seeds one generator per prompt. Without it the global torch
    RNG is used.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingConfig,
        *,
        chat: bool | None = None,
        batch_size: int = 32,
        generator: torch.Generator | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if chat is None:
            chat = tokenizer.chat_template is not None
        if chat and tokenizer.chat_template is None:
            raise ValueError("chat=True needs a tokenizer with a chat template, and this tokenizer has none")
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.chat, self.batch_size, self.generator = chat, batch_size, generator
        self.usage = LLMUsage()

    def complete(self, prompts: list[str]) -> list[str]:
        if not prompts:
            return []  # the tokenizer refuses an empty batch
        started = time.perf_counter()
        texts = [chat_text(self.tokenizer, prompt) for prompt in prompts] if self.chat else list(prompts)
        row_generators = None
        if self.generator is not None:
            seeds = torch.randint(0, 2**62, (len(texts),), generator=self.generator).tolist()
            row_generators = [torch.Generator().manual_seed(seed) for seed in seeds]

        with torch.inference_mode():
            samples = sample(
                self.model,
                self.tokenizer,
                texts,
                self.sampling,
                row_generators,
                rows=self.batch_size,
                max_slots=MAX_BATCH_SLOTS,
            )
        self.usage.completion_tokens += sum(len(token_ids) for token_ids in samples.token_ids)
        self.usage.prompt_tokens += sum(samples.prompt_lengths)
        self.usage.calls += len(prompts)
        self.usage.seconds += time.perf_counter() - started
        return samples.texts


class OpenAILLM:
    """Completions from an OpenAI-compatible server, with up to `concurrency` requests in flight.

    `chat=True` uses the chat endpoint with each prompt as a single user message; `chat=False` the
    completions endpoint with the raw prompt. `seed` makes a run reproducible on servers that honour
    seeds: each request gets its own seed drawn from it, so repeated prompts still differ.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        sampling: SamplingConfig,
        *,
        chat: bool,
        api_key: str | None = None,
        concurrency: int = 8,
        seed: int | None = None,
    ) -> None:
        if len(sampling.stop_strings) > MAX_API_STOP_STRINGS:
            raise ValueError(
                f"the OpenAI API takes at most {MAX_API_STOP_STRINGS} stop strings, got {len(sampling.stop_strings)}"
            )
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url, self.model, self.sampling = base_url, model, sampling
        self.chat, self.concurrency = chat, concurrency
        import openai  # here, not at the top: only a server needs it (and a GPU machine may not have it)

        self.api_error = openai.APIError
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY", "none"))
        self.request_seeds = random.Random(seed) if seed is not None else None
        self.usage = LLMUsage()

    def complete(self, prompts: list[str]) -> list[str]:
        started = time.perf_counter()
        seeds = [self.request_seeds.randrange(2**31) if self.request_seeds else None for _ in prompts]
        with ThreadPoolExecutor(self.concurrency) as pool:
            replies = list(pool.map(self._request, prompts, seeds))
        self.usage.calls += len(prompts)
        self.usage.prompt_tokens += sum(prompt_tokens for _, prompt_tokens, _ in replies)
        self.usage.completion_tokens += sum(completion_tokens for _, _, completion_tokens in replies)
        self.usage.seconds += time.perf_counter() - started
        return [text for text, _, _ in replies]

    def _request(self, prompt: str, seed: int | None) -> tuple[str, int, int]:
        """One completion: `(text, prompt_tokens, completion_tokens)` as the server reports them."""
        settings = {
            "model": self.model,
            "max_tokens": self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "stop": list(self.sampling.stop_strings) or None,
            "seed": seed,
            # not in OpenAI's API; llama.cpp's and vLLM's servers read it from the request body
            "extra_body": {"top_k": self.sampling.top_k} if self.sampling.top_k else None,
        }
        try:
            if self.chat:
                response = self.client.chat.completions.create(
                    messages=[{"role": "user", "content": prompt}], **settings
                )
                text = response.choices[0].message.content or ""
            else:
                response = self.client.completions.create(prompt=prompt, **settings)
                text = response.choices[0].text
        except self.api_error as error:
            raise RuntimeError(f"the LLM server at {self.base_url} failed: {type(error).__name__}: {error}") from error
        if response.usage is None:
            raise RuntimeError(f"the LLM server at {self.base_url} reported no token usage")
        return text, response.usage.prompt_tokens, response.usage.completion_tokens


def load_llm(
    spec: str,
    sampling: SamplingConfig,
    *,
    chat: bool | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    batch_size: int = 32,
    generator: torch.Generator | None = None,
) -> HFLLM | OpenAILLM:
    """The LLM named by `spec`: `openai:BASE_URL#MODEL` for a server, else anything `load_causal_lm`
    accepts (`smollm2-135m`, a hub id, a local directory), run locally in `dtype` on `device`.

    `chat=None` decides, here and only here: always for a server (its chat endpoint), for a local
    model when its tokenizer has a chat template. `generator` makes either reproducible; for a
    server it draws the seed of its requests. `dtype`, `device` and `batch_size` only apply to a local model.
    """
    if spec.startswith(OPENAI_PREFIX):
        base_url, _, model = spec.removeprefix(OPENAI_PREFIX).partition("#")
        if not base_url or not model:
            raise ValueError(f"LLM spec {spec!r} must be {OPENAI_PREFIX}BASE_URL#MODEL")
        seed = int(torch.randint(0, 2**31, (1,), generator=generator)) if generator is not None else None
        return OpenAILLM(base_url, model, sampling, chat=True if chat is None else chat, seed=seed)
    model, tokenizer = load_causal_lm(spec, device=device, dtype=dtype)  # in eval mode
    return HFLLM(model, tokenizer, sampling, chat=chat, batch_size=batch_size, generator=generator)
