"""Sampling on every accepted model architecture (tests/model_architectures.py), on the path `attention_paths`
gives it, against the slowest obvious reference: one unpadded full forward over the prompt and the tokens so far.

Streams restart often here (single-character stops), so a restarted stream that still saw its previous
puzzle, or a window counted in the wrong slots (the prompts are longer than the windowed architectures' 8-token
window), would show."""

from __future__ import annotations

import pytest
import torch
from model_architectures import ARCHITECTURES, tiny_model
from support import DEVICES, generators, reference_logprobs, stream_alone

from codeplay_lightning.models import sampling
from codeplay_lightning.models.architectures import attention_paths
from codeplay_lightning.models.sampling import SamplingConfig, sample, sample_streams

FEW_SHOT = "def f(s: str):\n    return s == 'ab'\n\ndef g():\n    return 'ab'\n\nassert f(g())\n\n"
PROMPTS = [
    FEW_SHOT + "def f(x: int):\n    return x > 3\n",
    FEW_SHOT + "assert f(g())\n\ndef g():",
    "a",
    FEW_SHOT + "def f(x: int):\n    return x > 3\n",
]  # a shared prefix, a repeated prompt, a short one
STOPS = tuple("aeiou\n:>")
FAST = {"llama", "gpt2", "gpt_neox", "phi"}


@pytest.fixture(scope="module", params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture(scope="module", params=ARCHITECTURES)
def model(request, char_tokenizer, device):
    return tiny_model(request.param, char_tokenizer).to(device)


def test_each_family_takes_the_path_its_test_proves(model):
    assert attention_paths(model).fast == (model.config.model_type in FAST)
    expected = sampling._BehindSharedPrefix if model.config.model_type in FAST else sampling._WholeContext
    assert sampling._context_class(model) is expected


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_streams_restart_and_match_each_stream_alone(model, char_tokenizer, temperature):
    config = SamplingConfig(30, temperature, stop_strings=STOPS)
    seeds = [3, 4, 5]
    streams = sample_streams(model, char_tokenizer, FEW_SHOT, 30, config, generators(seeds))
    expected = [piece for seed in seeds for piece in stream_alone(model, char_tokenizer, FEW_SHOT, 30, config, seed)]
    assert [ids.tolist() for ids in streams.token_ids] == [ids for ids, _, _ in expected]
    assert streams.finished == [finished for _, _, finished in expected]
    for ours, (_, logprobs, _) in zip(streams.logprobs, expected):
        torch.testing.assert_close(ours, torch.tensor(logprobs), atol=1e-4, rtol=1e-4)
    assert sum(streams.finished) >= len(seeds) + 2  # streams did restart, more than once for some


@pytest.mark.parametrize("rows", [None, 2])  # 2: rows refilled as they finish (continuous batching)
def test_solver_sampling_matches_a_full_forward_and_each_prompt_alone(model, char_tokenizer, rows):
    config = SamplingConfig(max_new_tokens=14, temperature=0.8, stop_strings=("\n",))
    seeds = list(range(1, len(PROMPTS) + 1))
    batched = sample(model, char_tokenizer, PROMPTS, config, generators(seeds), rows=rows)
    for index, (prompt, seed) in enumerate(zip(PROMPTS, seeds)):
        expected = reference_logprobs(model, char_tokenizer, prompt, batched.token_ids[index], config.temperature)
        torch.testing.assert_close(batched.logprobs[index], expected, atol=1e-4, rtol=1e-4)
        alone = sample(model, char_tokenizer, [prompt], config, generators([seed]))
        assert torch.equal(batched.token_ids[index], alone.token_ids[0])


def test_under_bf16_autocast_streams_keep_to_a_full_forward_and_their_own_batch(model, char_tokenizer):
    """bf16 rounds differently in a batched cache (the shared-prefix attention computes in float32) than in one
    full forward, so log-probs agree to bf16's precision only: on these large-weight models 0.005-0.04 nats
    on average and at most 0.34 (a sampler that lost the prompt is 12-22 nats off). What a stream samples must
    still not depend on the other streams."""
    config = SamplingConfig(30, 0.8, stop_strings=STOPS)
    with torch.autocast(model.device.type, dtype=torch.bfloat16):
        together = sample_streams(model, char_tokenizer, FEW_SHOT, 30, config, generators([7, 8, 9]))
        alone = [sample_streams(model, char_tokenizer, FEW_SHOT, 30, config, generators([seed])) for seed in (7, 8, 9)]
        errors = torch.cat(
            [
                (reference_logprobs(model, char_tokenizer, FEW_SHOT, ids, config.temperature) - logprobs).abs()
                for ids, logprobs in zip(together.token_ids, together.logprobs)
            ]
        )
    assert errors.mean() < 0.05 and errors.max() < 0.5
    assert [ids.tolist() for ids in together.token_ids] == [ids.tolist() for one in alone for ids in one.token_ids]


@pytest.mark.parametrize("architecture", ["gpt_neo", "qwen2", "mistral"])
def test_the_shared_prefix_path_would_be_wrong_for_a_windowed_family(architecture, char_tokenizer, monkeypatch):
    """Why these architectures take the plain path: forced onto the shared-prefix one, their windows (GPT-Neo's
    attention is not even looked up by name) break sampling, silently or loudly."""
    model = tiny_model(architecture, char_tokenizer)
    monkeypatch.setattr(sampling, "_context_class", lambda model: sampling._BehindSharedPrefix)
    config = SamplingConfig(20, 0.8, stop_strings=STOPS)
    try:
        streams = sample_streams(model, char_tokenizer, FEW_SHOT, 20, config, generators([1, 2]))
    except RuntimeError:
        return
    errors = [
        (reference_logprobs(model, char_tokenizer, FEW_SHOT, ids, 0.8) - logprobs).abs().max()
        for ids, logprobs in zip(streams.token_ids, streams.logprobs)
    ]
    assert max(errors) > 0.1
