"""HFLLM on the tiny random Llama against `sample` called directly; OpenAILLM and `load_llm` errors
that need no server. The real llama.cpp server is in tests/integration/test_openai_server.py."""

from __future__ import annotations

import copy
import socket

import pytest
import torch

from codeplay_lightning.llm import HFLLM, OpenAILLM, backends, load_llm
from codeplay_lightning.models import sampling
from codeplay_lightning.models.sampling import SamplingConfig, sample

PROMPTS = ["def f(x: int):\n    return x > 3\n", "a", "assert f(g())\n\ndef g():"]
SAMPLING = SamplingConfig(max_new_tokens=8, temperature=1.0, stop_strings=("\n",))
CHAT_TEMPLATE = (
    "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def reference(model, tokenizer, texts: list[str], seed: int):
    """What HFLLM should do: one generator per prompt, seeded from `seed`, all prompts in one batch."""
    seeds = torch.randint(0, 2**62, (len(texts),), generator=torch.Generator().manual_seed(seed)).tolist()
    return sample(model, tokenizer, texts, SAMPLING, [torch.Generator().manual_seed(s) for s in seeds])


def seeded_llm(model, tokenizer, batch_size: int, seed: int) -> HFLLM:
    return HFLLM(
        model, tokenizer, SAMPLING, chat=False, batch_size=batch_size, generator=torch.Generator().manual_seed(seed)
    )


def test_completion_mode_returns_one_completion_per_prompt_and_counts_usage(tiny_llama, char_tokenizer):
    llm = HFLLM(tiny_llama, char_tokenizer, SAMPLING, chat=False, generator=torch.Generator().manual_seed(0))
    completions = llm.complete(PROMPTS)

    expected = reference(tiny_llama, char_tokenizer, PROMPTS, seed=0)
    assert completions == expected.texts
    assert llm.usage.calls == 3
    assert llm.usage.prompt_tokens == sum(len(prompt) for prompt in PROMPTS)  # one token per character
    assert llm.usage.completion_tokens == sum(len(ids) for ids in expected.token_ids)
    assert llm.usage.seconds > 0

    llm.complete(PROMPTS[:1])
    assert llm.usage.calls == 4 and llm.usage.prompt_tokens == sum(map(len, PROMPTS)) + len(PROMPTS[0])
    assert llm.complete([]) == [] and llm.usage.calls == 4


def test_generator_makes_completions_reproducible_whatever_the_batch_size(tiny_llama, char_tokenizer):
    def completions(batch_size: int) -> list[str]:
        llm = seeded_llm(tiny_llama, char_tokenizer, batch_size, seed=5)
        return llm.complete(PROMPTS * 2) + llm.complete(PROMPTS)

    one_at_a_time = completions(1)
    assert completions(4) == one_at_a_time
    assert completions(32) == one_at_a_time


def test_a_long_prompt_runs_in_fewer_rows_after_the_others_and_leaves_the_completions_as_one_at_a_time(
    tiny_llama, char_tokenizer, monkeypatch
):
    prompts = [*PROMPTS, "x" * 60, *PROMPTS]
    monkeypatch.setattr(backends, "MAX_BATCH_SLOTS", 3 * (60 + SAMPLING.max_new_tokens))
    runs: list[tuple[list[int], int]] = []
    decode = sampling._decode
    monkeypatch.setattr(
        sampling,
        "_decode",
        lambda decoded, queue, rows, start: runs.append((list(queue), rows)) or decode(decoded, queue, rows, start),
    )

    one_at_a_time = seeded_llm(tiny_llama, char_tokenizer, 1, seed=3).complete(prompts)
    runs.clear()
    assert seeded_llm(tiny_llama, char_tokenizer, 4, seed=3).complete(prompts) == one_at_a_time
    # 4 rows of up to 51 slots each; the long prompt needs 68, and runs after the others, alone
    assert runs == [([0, 1, 2, 4, 5, 6], 4), ([3], 1)]


def test_chat_mode_applies_the_chat_template(tiny_llama, char_tokenizer):
    tokenizer = copy.deepcopy(char_tokenizer)
    tokenizer.chat_template = CHAT_TEMPLATE
    llm = HFLLM(tiny_llama, tokenizer, SAMPLING, chat=True, generator=torch.Generator().manual_seed(1))
    completions = llm.complete(PROMPTS)

    templated = [f"<user>{prompt}\n<assistant>" for prompt in PROMPTS]
    expected = reference(tiny_llama, tokenizer, templated, seed=1)
    assert completions == expected.texts
    assert llm.usage.prompt_tokens == sum(len(tokenizer(text)["input_ids"]) for text in templated)
    assert llm.usage.completion_tokens == sum(len(ids) for ids in expected.token_ids)


def test_chat_mode_without_a_chat_template_is_an_error(tiny_llama, char_tokenizer):
    with pytest.raises(ValueError, match="chat template"):
        HFLLM(tiny_llama, char_tokenizer, SAMPLING, chat=True)


@pytest.mark.parametrize("spec", ["openai:http://x", "openai:http://x#", "openai:#model"])
def test_openai_spec_needs_a_base_url_and_a_model(spec):
    with pytest.raises(ValueError, match="BASE_URL#MODEL"):
        load_llm(spec, SAMPLING, chat=False)


def test_openai_spec_gives_an_openai_llm():
    llm = load_llm("openai:http://127.0.0.1:8000/v1#smollm2", SAMPLING, chat=True)
    assert isinstance(llm, OpenAILLM)
    assert (llm.base_url, llm.model, llm.chat) == ("http://127.0.0.1:8000/v1", "smollm2", True)


def test_more_stop_strings_than_the_api_takes_is_an_error():
    sampling = SamplingConfig(max_new_tokens=8, stop_strings=("a", "b", "c", "d", "e"))
    with pytest.raises(ValueError, match="at most 4 stop strings"):
        OpenAILLM("http://127.0.0.1:8000/v1", "m", sampling, chat=False)


def test_an_unreachable_server_is_an_error_naming_its_url():
    with socket.socket() as probe:  # a port nobody listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    llm = OpenAILLM(base_url, "m", SAMPLING, chat=False)
    with pytest.raises(RuntimeError, match=f"server at {base_url} failed"):
        llm.complete(PROMPTS)
