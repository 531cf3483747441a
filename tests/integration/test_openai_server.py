"""OpenAILLM against a real llama.cpp server on the embedded model's GGUF (slow; needs the `server`
extra, `make install-server`, which CI installs)."""

from __future__ import annotations

import pytest

from benchmarks.llama_server import embedded_gguf, llama_server
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm import OpenAILLM, load_llm
from codeplay_lightning.models.sampling import SamplingConfig
from codeplay_lightning.puzzles import bundled_puzzles
from codeplay_lightning.search import GifMcts, GifMctsConfig, P3Task, run_searches

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.slow

PROMPTS = ["def f(x: int):\n    return x > 3\n\ndef g():\n", "The three primary colours are"]
GREEDY = SamplingConfig(max_new_tokens=16, temperature=0.0)


@pytest.fixture(scope="module")
def server_url():
    with llama_server(embedded_gguf(), threads=1) as base_url:
        yield base_url


def record_reported_usage(monkeypatch, endpoint) -> list:
    """Wrap `endpoint.create` so that the usage of every response the server sends is kept."""
    reported = []
    create = endpoint.create

    def create_and_record(**request):
        response = create(**request)
        reported.append(response.usage)
        return response

    monkeypatch.setattr(endpoint, "create", create_and_record)
    return reported


@pytest.mark.parametrize("chat", [False, True])
def test_completions_in_order_with_the_usage_the_server_reports(server_url, monkeypatch, chat):
    llm = OpenAILLM(server_url, "smollm2", GREEDY, chat=chat, concurrency=2)
    endpoint = llm.client.chat.completions if chat else llm.client.completions
    reported = record_reported_usage(monkeypatch, endpoint)

    completions = llm.complete(PROMPTS)

    assert len(completions) == 2 and all(completion.strip() for completion in completions)
    assert completions == [llm.complete([prompt])[0] for prompt in PROMPTS]  # greedy: the order is kept
    assert llm.usage.calls == 4 and llm.usage.seconds > 0
    assert llm.usage.prompt_tokens == sum(usage.prompt_tokens for usage in reported) > 0
    assert llm.usage.completion_tokens == sum(usage.completion_tokens for usage in reported) > 0


def test_stop_strings_end_the_completion_before_them(server_url):
    sampling = SamplingConfig(max_new_tokens=16, temperature=0.0, stop_strings=(",",))
    llm = OpenAILLM(server_url, "smollm2", sampling, chat=False)
    completions = llm.complete(["1, 2, 3, 4, 5,", "red, green, blue, yellow,"])
    assert all(completion.strip() and "," not in completion for completion in completions)
    assert llm.usage.completion_tokens < 2 * sampling.max_new_tokens  # stopped early, not cut by the cap


def test_top_k_reaches_the_server(server_url):
    """top_k = 1 at a high temperature is greedy whatever the seed; without it the draws differ."""
    (greedy,) = OpenAILLM(server_url, "smollm2", GREEDY, chat=False).complete(PROMPTS[1:])
    for top_k, only_greedy in ((1, True), (0, False)):
        llm = OpenAILLM(server_url, "smollm2", SamplingConfig(16, 1.5, top_k=top_k), chat=False, seed=0)
        draws = set(llm.complete(PROMPTS[1:] * 4))
        assert (draws == {greedy}) is only_greedy, draws


def test_load_llm_gives_an_openai_llm_that_answers(server_url):
    llm = load_llm(f"openai:{server_url}#smollm2", SamplingConfig(max_new_tokens=16, temperature=0.7), chat=True)
    assert isinstance(llm, OpenAILLM)
    (completion,) = llm.complete(["Write a Python function that adds two numbers."])
    assert completion.strip() and llm.usage.calls == 1


def test_a_gif_mcts_search_through_the_server(server_url):
    """The search's calls go through OpenAILLM: the budget is spent (or a solution found) and counted."""
    puzzle = next(p for p in bundled_puzzles() if p.name == "good_morning")
    llm = OpenAILLM(server_url, "smollm2", SamplingConfig(max_new_tokens=48, temperature=1.0, top_p=0.8), chat=True)
    with Sandbox(workers=1, timeout=1.0) as sandbox:
        search = GifMcts(P3Task(puzzle, sandbox), GifMctsConfig(budget=2))
        (result,) = run_searches([search], llm)
    assert result.calls == llm.usage.calls == len([node for node in search.root.walk() if node.action != "root"])
    assert result.calls == 2 or result.score == 1.0
    assert llm.usage.prompt_tokens > 0 and llm.usage.completion_tokens > 0
