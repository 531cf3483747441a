"""The sampling loop against the slowest obvious reference: one prompt at a time, one full forward."""

from __future__ import annotations

import gc
import math
import random
import string

import pytest
import torch
from support import generators, reference_logprobs, stream_alone
from transformers.cache_utils import Cache, CacheLayerMixin

from codeplay_lightning.models import sampling
from codeplay_lightning.models.sampling import (
    Samples,
    SamplingConfig,
    contexts,
    inverse_cdf,
    pick_tokens,
    sample,
    sample_streams,
    slot_limited_runs,
    token_consistent_prompt,
)

PROMPTS = ["def f(x: int):\n    return x > 3\n", "a", "assert f(g())\n\ndef g():"]
FEW_SHOT = "def f(s: str):\n    return s == 'ab'\n\ndef g():\n    return 'ab'\n\nassert f(g())\n\n"
PROMPT_SETS = {
    "distinct": PROMPTS,
    "repeated": PROMPTS + PROMPTS[:1],  # a repeated prompt is prefilled once
    "shared prefix": [FEW_SHOT + prompt for prompt in PROMPTS],  # the common prefix is prefilled once
}


@pytest.mark.parametrize("prompt_set", PROMPT_SETS)
@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (0.8, 1.0), (1.0, 0.5)])
def test_batched_sampling_matches_one_prompt_alone(tiny_llama, char_tokenizer, temperature, top_p, prompt_set):
    prompts = PROMPT_SETS[prompt_set]
    seeds = list(range(1, len(prompts) + 1))
    config = SamplingConfig(max_new_tokens=12, temperature=temperature, top_p=top_p, stop_strings=("\n",))
    batched = sample(tiny_llama, char_tokenizer, prompts, config, generators(seeds))
    for index, (prompt, seed) in enumerate(zip(prompts, seeds)):
        alone = sample(tiny_llama, char_tokenizer, [prompt], config, generators([seed]))
        assert torch.equal(batched.token_ids[index], alone.token_ids[0])
        # the rows behind another common prefix sum in another order: up to 3.4e-5 nats on an AVX2 host (fp32)
        torch.testing.assert_close(batched.logprobs[index], alone.logprobs[0], atol=1e-4, rtol=1e-5)
        assert batched.texts[index] == alone.texts[0]
        assert batched.finished[index] == alone.finished[0]


@pytest.mark.parametrize("prompt_set", PROMPT_SETS)
@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (0.7, 1.0), (1.3, 0.9)])
def test_logprobs_match_a_full_forward(tiny_llama, char_tokenizer, temperature, top_p, prompt_set):
    prompts = PROMPT_SETS[prompt_set]
    config = SamplingConfig(max_new_tokens=16, temperature=temperature, top_p=top_p)
    samples = sample(tiny_llama, char_tokenizer, prompts, config, generators(list(range(4, 4 + len(prompts)))))
    for prompt, token_ids, logprobs in zip(prompts, samples.token_ids, samples.logprobs):
        expected = reference_logprobs(tiny_llama, char_tokenizer, prompt, token_ids, temperature)
        torch.testing.assert_close(logprobs, expected, atol=1e-4, rtol=1e-4)


def test_sampling_under_bf16_autocast_matches_a_full_forward_under_autocast(tiny_llama, char_tokenizer):
    config = SamplingConfig(max_new_tokens=8, temperature=0.8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        samples = sample(tiny_llama, char_tokenizer, PROMPTS, config, generators([1, 2, 3]))
        for prompt, token_ids, logprobs in zip(PROMPTS, samples.token_ids, samples.logprobs):
            expected = reference_logprobs(tiny_llama, char_tokenizer, prompt, token_ids, config.temperature)
            torch.testing.assert_close(logprobs, expected, atol=0.05, rtol=0.05)


def test_same_generators_reproduce_and_different_ones_do_not(tiny_llama, char_tokenizer):
    config = SamplingConfig(max_new_tokens=16, temperature=1.0)
    first = sample(tiny_llama, char_tokenizer, PROMPTS, config, generators([7, 8, 9]))
    again = sample(tiny_llama, char_tokenizer, PROMPTS, config, generators([7, 8, 9]))
    other = sample(tiny_llama, char_tokenizer, PROMPTS, config, generators([10, 11, 12]))
    assert all(torch.equal(a, b) for a, b in zip(first.token_ids, again.token_ids))
    assert not all(torch.equal(a, b) for a, b in zip(first.token_ids, other.token_ids))


def test_stop_string_truncates_text_and_ends_tokens_at_the_completing_token(tiny_llama, char_tokenizer):
    free = sample(tiny_llama, char_tokenizer, PROMPTS[:1], SamplingConfig(max_new_tokens=24, temperature=0.0))
    free_ids, free_text = free.token_ids[0], free.texts[0]
    assert len(free_ids) == 24 and not free.finished[0]
    stop = free_text[10:12]
    cut = free_text.find(stop)
    n_tokens = next(n for n in range(1, 25) if stop in char_tokenizer.decode(free_ids[:n]))

    config = SamplingConfig(max_new_tokens=24, temperature=0.0, stop_strings=(stop, "never seen"))
    stopped = sample(tiny_llama, char_tokenizer, PROMPTS[:1], config)

    assert stopped.texts[0] == free_text[:cut]
    assert torch.equal(stopped.token_ids[0], free_ids[:n_tokens])
    torch.testing.assert_close(stopped.logprobs[0], free.logprobs[0][:n_tokens])
    assert stopped.finished[0]


def test_rows_finish_independently_and_keep_prompt_order(tiny_llama, char_tokenizer):
    free = sample(tiny_llama, char_tokenizer, PROMPTS, SamplingConfig(max_new_tokens=20, temperature=0.0))
    stop = free.texts[1][3:5]  # the second row stops early; the others may run on
    stopped = sample(tiny_llama, char_tokenizer, PROMPTS, SamplingConfig(20, 0.0, 1.0, (stop,)))
    for index in range(len(PROMPTS)):
        cut = free.texts[index].find(stop)
        expected_text = free.texts[index] if cut < 0 else free.texts[index][:cut]
        assert stopped.texts[index] == expected_text
        assert stopped.finished[index] == (cut >= 0)
    assert len(stopped.token_ids[1]) < len(free.token_ids[1])


BEHIND_FEW_SHOT = [FEW_SHOT + prompt for prompt in PROMPTS * 3] + [FEW_SHOT]  # repeated prompts
MANY_PROMPTS = {"shared prefix": BEHIND_FEW_SHOT, "no shared prefix": [*BEHIND_FEW_SHOT, "assert f("]}


@pytest.mark.parametrize("prompt_set", MANY_PROMPTS)
@pytest.mark.parametrize("rows", [1, 2, 3])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_rows_refilled_as_they_finish_sample_what_each_prompt_samples_alone(
    tiny_llama, char_tokenizer, rows, temperature, prompt_set, monkeypatch
):
    """Continuous batching: through 1-3 rows, 10-11 prompts (the ring of each row's own slots wraps over) sample
    what each samples alone, with a full forward's log-probs; rows are refilled, every prompt once."""
    prompts = MANY_PROMPTS[prompt_set]
    fills = []
    fill = sampling._SlotRing.fill
    monkeypatch.setattr(
        sampling._SlotRing, "fill", lambda ring, slots, new: fills.append(len(new)) or fill(ring, slots, new)
    )
    config = SamplingConfig(max_new_tokens=10, temperature=temperature, stop_strings=("\n",))
    seeds = list(range(20, 20 + len(prompts)))
    together = sample(tiny_llama, char_tokenizer, prompts, config, generators(seeds), rows=rows)
    assert fills[0] == rows and sum(fills) == len(prompts) and len(fills) > 1
    for index, (prompt, seed) in enumerate(zip(prompts, seeds)):
        alone = sample(tiny_llama, char_tokenizer, [prompt], config, generators([seed]))
        assert torch.equal(together.token_ids[index], alone.token_ids[0])
        assert together.texts[index] == alone.texts[0] and together.finished[index] == alone.finished[0]
        expected = reference_logprobs(tiny_llama, char_tokenizer, prompt, together.token_ids[index], temperature)
        torch.testing.assert_close(together.logprobs[index], expected, atol=1e-4, rtol=1e-4)


def naive_runs(own_lengths, rows, max_new_tokens, max_slots):
    """The two runs, by a plain reading: the prompts that fit a full batch's share of the slots, then the rest in
    as many rows as the slots hold at their longest."""
    fits = [own + max_new_tokens <= max_slots // rows for own in own_lengths]
    short = [i for i, fit in enumerate(fits) if fit]
    long = [i for i, fit in enumerate(fits) if not fit]
    runs = [(short, min(rows, len(short)))] if short else []
    if long:
        slots_a_row = max(own_lengths[i] for i in long) + max_new_tokens
        runs.append((long, max(1, min(len(long), max_slots // slots_a_row))))
    return runs


@pytest.mark.parametrize("seed", range(20))
def test_slot_limited_runs_take_every_prompt_once_within_the_slots(seed):
    rng = random.Random(seed)
    own_lengths = [rng.choice([1, 3, 8, 40, 200]) for _ in range(rng.randrange(1, 30))]
    rows, max_new, max_slots = rng.randrange(1, 9), rng.randrange(1, 6), rng.randrange(10, 400)
    runs = slot_limited_runs(own_lengths, rows, max_new, max_slots)
    assert runs == naive_runs(own_lengths, rows, max_new, max_slots)
    assert sorted(i for run, _ in runs for i in run) == list(range(len(own_lengths)))
    for run, run_rows in runs:
        assert 1 <= run_rows <= rows
        assert run_rows == 1 or run_rows * (max(own_lengths[i] for i in run) + max_new) <= max_slots
    assert slot_limited_runs(own_lengths, rows, max_new, None) == [
        (list(range(len(own_lengths))), min(rows, len(own_lengths)))
    ]


def test_top_p_draws_only_from_the_nucleus_and_reports_full_vocabulary_logprobs():
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])  # nucleus at top_p=0.7: tokens 1 and 3 (0.5 + 0.3)
    logits = probs.log().expand(4000, 4)  # (B, V)
    uniforms = torch.rand(4000, generator=torch.Generator().manual_seed(0))

    tokens, logprobs = pick_tokens(logits, temperature=1.0, top_p=0.7, uniforms=uniforms)

    assert set(tokens.tolist()) == {1, 3}
    assert abs((tokens == 1).float().mean().item() - 0.5 / 0.8) < 0.03
    torch.testing.assert_close(logprobs, probs.log()[tokens])


@pytest.mark.parametrize(
    "top_k, top_p, drawn, share_of_token_1",
    [
        (1, 1.0, {1}, 1.0),
        (2, 1.0, {1, 3}, 0.5 / 0.8),
        (3, 0.7, {1, 3}, 0.5 / 0.8),  # top-p of the kept 0.95: 0.5 + 0.3 >= 0.665
        (3, 0.5, {1}, 1.0),  # 0.5 >= 0.475
        (4, 1.0, {0, 1, 2, 3}, 0.5),
    ],
)
def test_top_k_keeps_the_k_most_likely_then_top_p_within_them(top_k, top_p, drawn, share_of_token_1):
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    uniforms = torch.rand(4000, generator=torch.Generator().manual_seed(0))
    tokens, logprobs = pick_tokens(probs.log().expand(4000, 4), 1.0, top_p, uniforms, top_k=top_k)
    assert set(tokens.tolist()) == drawn
    assert abs((tokens == 1).float().mean().item() - share_of_token_1) < 0.03
    torch.testing.assert_close(logprobs, probs.log()[tokens])  # always the full vocabulary's


def test_without_top_p_tokens_are_drawn_with_their_probabilities():
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    uniforms = torch.rand(4000, generator=torch.Generator().manual_seed(0))
    tokens, _ = pick_tokens(probs.log().expand(4000, 4), temperature=1.0, top_p=1.0, uniforms=uniforms)
    frequencies = torch.bincount(tokens, minlength=4) / 4000
    torch.testing.assert_close(frequencies, probs, atol=0.03, rtol=0)


@pytest.mark.parametrize("top_p", [1.0, 0.6])
def test_uniforms_at_the_edges_never_pick_impossible_tokens(top_p):
    logits = torch.tensor([[-math.inf, 3.0, -math.inf, 2.0, -math.inf]]).expand(2, 5)  # (B, V)
    uniforms = torch.tensor([0.0, 1.0 - 1e-7])
    tokens, logprobs = pick_tokens(logits, temperature=1.0, top_p=top_p, uniforms=uniforms)
    assert tokens.tolist() == ([1, 3] if top_p == 1.0 else [1, 1])  # at 0.6 the nucleus is token 1 alone (0.73)
    assert torch.isfinite(logprobs).all()


def test_temperature_zero_is_greedy_with_logprobs_at_temperature_one():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    tokens, logprobs = pick_tokens(logits, temperature=0.0, top_p=1.0, uniforms=torch.rand(1))
    assert tokens.tolist() == [1]
    torch.testing.assert_close(logprobs, torch.log_softmax(logits, dim=-1)[:, 1])


def test_result_has_one_entry_per_prompt(tiny_llama, char_tokenizer):
    samples = sample(tiny_llama, char_tokenizer, PROMPTS, SamplingConfig(max_new_tokens=5))
    assert isinstance(samples, Samples)
    assert len(samples.texts) == len(samples.token_ids) == len(samples.logprobs) == len(samples.finished) == 3
    for token_ids, logprobs in zip(samples.token_ids, samples.logprobs):
        assert token_ids.dtype == torch.long and logprobs.dtype == torch.float32
        assert 1 <= len(token_ids) == len(logprobs) <= 5
    assert samples.prompt_lengths == [len(prompt) for prompt in PROMPTS]  # one token per character


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 4, "temperature": -0.1}, "temperature"),
        ({"max_new_tokens": 4, "top_p": 0.0}, "top_p"),
        ({"max_new_tokens": 4, "stop_strings": ("",)}, "empty"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingConfig(**kwargs)


def test_sample_rejects_mismatched_generators_and_empty_prompts(tiny_llama, char_tokenizer):
    config = SamplingConfig(max_new_tokens=4)
    with pytest.raises(ValueError, match="one per prompt"):
        sample(tiny_llama, char_tokenizer, PROMPTS, config, generators([1]))
    with pytest.raises(ValueError, match="no tokens"):
        sample(tiny_llama, char_tokenizer, ["a", ""], config)


def _gpt2_like_tokenizer():
    """Characters, one merge ("\n\n") and GPT-2's whitespace rule: a run of whitespace before a word
    leaves its last character to stand alone, so a blank line is "\n\n" at the end of a text but
    "\n", "\n" before `def`, as SmolLM2's tokenizer does."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: index for index, char in enumerate(dict.fromkeys(string.printable))}
    vocab["\n\n"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab, [("\n", "\n")]))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s+(?!\S)|\s+|[^\s]+"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_a_prompt_ends_on_the_tokens_its_own_block_has_there(char_tokenizer):
    from codeplay_lightning.puzzles import fewshot_puzzles, setter_prompt

    examples = fewshot_puzzles()[:2]
    prompt = setter_prompt(examples)
    tokenizer = _gpt2_like_tokenizer()
    consistent = token_consistent_prompt(tokenizer, prompt, examples[0].f)
    assert consistent == prompt[:-1]  # the final blank line's second newline is left to the model
    ids = tokenizer(consistent)["input_ids"]
    assert ids == tokenizer(prompt + examples[0].f)["input_ids"][: len(ids)]
    assert tokenizer(prompt)["input_ids"][-1] == tokenizer.convert_tokens_to_ids("\n\n")  # what went wrong
    assert token_consistent_prompt(char_tokenizer, prompt, examples[0].f) == prompt  # nothing to fix here


# ---------------------------------------------------------------- continuous streams


@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (0.9, 1.0), (1.2, 0.8)])
def test_streams_restart_in_place_and_match_each_stream_alone(tiny_llama, char_tokenizer, temperature, top_p):
    config = SamplingConfig(30, temperature, top_p, stop_strings=tuple("aeiou\n"))
    seeds = [3, 4, 5, 6]
    streams = sample_streams(tiny_llama, char_tokenizer, FEW_SHOT, 30, config, generators(seeds))
    expected = [
        piece for seed in seeds for piece in stream_alone(tiny_llama, char_tokenizer, FEW_SHOT, 30, config, seed)
    ]
    assert [ids.tolist() for ids in streams.token_ids] == [ids for ids, _, _ in expected]
    assert streams.finished == [finished for _, _, finished in expected]
    for ours, (_, logprobs, _) in zip(streams.logprobs, expected):
        torch.testing.assert_close(ours, torch.tensor(logprobs), atol=1e-4, rtol=1e-4)
    assert sum(streams.finished) >= len(seeds) + 2  # streams did restart, more than once for some
    assert sum(len(ids) for ids in streams.token_ids) == 30 * len(seeds)  # every step of every stream is used
    assert streams.prompt_lengths == [len(FEW_SHOT)] * len(streams.texts)
    for text, ids in zip(streams.texts, streams.token_ids):  # text is cut before its stop, as `sample` cuts
        assert char_tokenizer.decode(ids).startswith(text)


def test_streams_do_not_depend_on_their_batch_under_bf16_autocast(tiny_llama, char_tokenizer):
    config = SamplingConfig(40, 0.8, stop_strings=tuple("aeiou\n"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        together = sample_streams(tiny_llama, char_tokenizer, FEW_SHOT, 40, config, generators([7, 8, 9]))
        alone = [
            sample_streams(tiny_llama, char_tokenizer, FEW_SHOT, 40, config, generators([seed])) for seed in (7, 8, 9)
        ]
    assert [ids.tolist() for ids in together.token_ids] == [ids.tolist() for one in alone for ids in one.token_ids]
    assert together.finished == [finished for one in alone for finished in one.finished]
    assert sum(together.finished) > 3


@pytest.mark.parametrize("streams", [False, True], ids=["sample", "sample_streams"])
def test_sampling_leaves_no_reference_cycles(tiny_llama, char_tokenizer, streams):
    """The KV caches are freed when sampling returns, not when the cyclic collector next runs: in a long run its
    full collections are rare, and caches held in cycles piled up iteration after iteration."""
    config = SamplingConfig(12, 0.9, stop_strings=("\n",))
    gc.collect()
    gc.disable()
    try:
        if streams:
            sample_streams(tiny_llama, char_tokenizer, FEW_SHOT, 12, config, generators([1, 2]))
        else:
            sample(tiny_llama, char_tokenizer, BEHIND_FEW_SHOT, config, generators(range(len(BEHIND_FEW_SHOT))), rows=2)
        assert _caches_only_the_collector_frees() == []
    finally:
        gc.enable()


def _caches_only_the_collector_frees() -> list[str]:
    """The caches and cache layers in reference cycles, by type: only those, as other threads left by earlier tests
    (gc is process-wide) may leave cyclic garbage of their own meanwhile."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return [type(o).__name__ for o in gc.garbage if isinstance(o, (Cache, CacheLayerMixin, contexts._SlotRing))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.parametrize("vocab", [3, 256, 1000])
def test_inverse_cdf_in_blocks_matches_a_flat_cumulative_sum(vocab):
    """The two-level draw against the plain one in float64: the first token whose cumulative weight exceeds u."""
    generator = torch.Generator().manual_seed(vocab)
    weights = torch.rand(500, vocab, generator=generator) * (torch.rand(500, vocab, generator=generator) < 0.3)
    weights[:, 1] += 0.01  # no row all zero
    uniforms = torch.rand(500, generator=generator)
    cdf = weights.double().cumsum(dim=-1)
    expected = (cdf <= uniforms.double()[:, None] * cdf[:, -1:]).sum(dim=-1)
    drawn = inverse_cdf(weights, uniforms)
    assert (drawn == expected).float().mean() > 0.99  # float32 sums may cross a boundary the other side
    assert (weights.gather(-1, drawn[:, None]) > 0).all()


def test_pick_tokens_reports_the_log_softmax_at_the_temperature():
    logits = torch.randn(8, 300, generator=torch.Generator().manual_seed(2)) * 4
    tokens, logprobs = pick_tokens(logits, 0.7, 1.0, torch.rand(8, generator=torch.Generator().manual_seed(3)))
    torch.testing.assert_close(logprobs, torch.log_softmax(logits / 0.7, dim=-1).gather(-1, tokens[:, None])[:, 0])
