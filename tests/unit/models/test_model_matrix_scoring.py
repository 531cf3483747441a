"""PPO scoring on every accepted model architecture (tests/model_architectures.py), on the path `attention_paths`
gives it, against the slowest obvious reference: one unpadded full forward per row over the prompt and that row's real
actions. Log-probs, values, entropies and every parameter's gradient must agree.

The prompt is longer than the windowed architectures' 8-token window, and the packs are small enough that rows of
different lengths (some of one token) share them at offsets of up to 5: a window counted in pack slots would
show."""

from __future__ import annotations

import contextlib
import copy
import functools

import pytest
import torch
from model_architectures import ARCHITECTURES, tiny_model
from support import DEVICES
from torch import nn
from torch.nn.functional import pad
from transformers import OPTConfig, OPTForCausalLM

from benchmarks.recompute import saved_activation_bytes
from codeplay_lightning.config import PPOConfig
from codeplay_lightning.models import scoring
from codeplay_lightning.models.architectures import AttentionPaths, UnsupportedModel, attention_paths
from codeplay_lightning.models.scoring import balanced_budget, pack_rows, score_actions
from codeplay_lightning.setter import SetterPPOModule
from codeplay_lightning.setter.module import ValueHead

TEMPERATURE = 0.7
PROMPT_LENGTH = 23
LENGTHS = [3, 1, 4, 2, 1, 6, 2, 3]  # real actions per row
PACK_TOKENS = 6  # packs of fed tokens (each row's but its last): [2, 0, 3, 1, 0], [5, 1], [2]
FAST = {"llama", "gpt2", "gpt_neox", "phi"}
# fp32: the paths sum the same terms in other orders (rows batched or packed, the prompt's gradient summed over
# the rows), so a few float32 ulps of log-probs down to -20 (measured at most 6e-6; gradients 6e-6 of their
# parameter's largest). bf16 autocast rounds every matmul's output to 8 bits: a rounding that goes the other way
# moves a logit of about 10 by its ulp, 2^-4, 0.09 at temperature 0.7 (measured: scores bitwise equal, since the
# fp32 differences rarely cross a bf16 rounding boundary). Gradients: autograd sums the contributions of the
# weights' bf16 copies in bf16, the reference's 8 rows in another grouping than ours (measured at most 1.7% of
# the parameter's largest).
TOLERANCES = {"fp32": {"atol": 1e-5, "rtol": 1e-5, "grad": 1e-4}, "bf16": {"atol": 0.1, "rtol": 0.01, "grad": 0.05}}


def inputs(vocab_size: int, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompt (P,), right-padded action ids (B, T) (padding id 0, as the buffer pads) and their mask."""
    generator = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, vocab_size, (PROMPT_LENGTH,), generator=generator)
    action_ids = torch.randint(3, vocab_size, (len(LENGTHS), max(LENGTHS)), generator=generator)
    mask = (torch.arange(max(LENGTHS))[None] < torch.tensor(LENGTHS)[:, None]).float()
    return prompt_ids.to(device), (action_ids * mask.long()).to(device), mask.to(device)


def full_forward_per_row(
    model: nn.Module, head: nn.Module, prompt_ids: torch.Tensor, action_ids: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row alone, unpadded: prompt + its real actions, the state at p predicting the token at p + 1."""
    rows = []
    for ids, length in zip(action_ids, mask.sum(dim=1).long().tolist()):
        output = model(input_ids=torch.cat([prompt_ids, ids[:length]])[None], output_hidden_states=True)
        before = slice(len(prompt_ids) - 1, -1)  # the states before the actions
        log_probs = torch.log_softmax(output.logits[0, before].float() / TEMPERATURE, dim=-1)  # (length, V)
        row = (
            log_probs.gather(-1, ids[:length, None]).squeeze(-1),
            head(output.hidden_states[-1][0, before]),
            -(log_probs.exp() * log_probs).sum(-1),
        )
        rows.append([pad(x, (0, mask.shape[1] - length)) for x in row])  # (T,) each, 0 at padding
    return tuple(torch.stack(column) for column in zip(*rows))


def ours(
    model: nn.Module,
    head: nn.Module,
    prompt_ids: torch.Tensor,
    action_ids: torch.Tensor,
    mask: torch.Tensor,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return score_actions(
        model, prompt_ids, action_ids, mask, TEMPERATURE, head, pack_tokens=PACK_TOKENS, recompute=recompute
    )


def gradients(parameters: dict[str, nn.Parameter], scores: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """Every parameter's gradient of a loss in which every token's log-prob, value and entropy count differently."""
    logprobs, values, entropies = scores
    weights = torch.linspace(0.5, 1.5, logprobs.numel()).view_as(logprobs)
    loss = (logprobs * weights).sum() + (values * weights).sum() + (entropies * weights.flip(0)).sum()
    return dict(zip(parameters, torch.autograd.grad(loss, list(parameters.values()))))


def new_head(model: nn.Module) -> ValueHead:
    torch.manual_seed(1)
    return ValueHead(model.config.hidden_size, 16)


def scores_and_gradients(
    architecture: str, tokenizer, precision: str, eager: bool, device: str, recompute: bool = False
) -> tuple[tuple, tuple]:
    """(log-probs, values and entropies by name; every parameter's gradient by name): ours, then the reference's."""
    model = tiny_model(architecture, tokenizer).to(device)
    if eager:  # on the packed path, an additive mask, not SDPA's boolean one
        model.set_attn_implementation("eager")
    head = new_head(model).to(device)
    parameters = {f"model.{name}": p for name, p in model.named_parameters()}
    parameters.update({f"head.{name}": p for name, p in head.named_parameters()})
    prompt_ids, action_ids, mask = inputs(model.config.vocab_size, device)
    autocast = torch.autocast(device, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    results = {}
    for name, scorer in (("ours", functools.partial(ours, recompute=recompute)), ("reference", full_forward_per_row)):
        with autocast:
            scores = scorer(model, head, prompt_ids, action_ids, mask)
        results[name] = (dict(zip(("logprobs", "values", "entropies"), scores)), gradients(parameters, scores))
    return results["ours"], results["reference"]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def architecture(request) -> str:
    return request.param


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("precision", "eager", "recompute"),
    [
        ("fp32", False, False),
        ("fp32", True, False),
        ("bf16", False, False),
        ("fp32", False, True),
        ("bf16", False, True),
    ],
)
def test_scoring_matches_a_full_forward_per_row(architecture, char_tokenizer, precision, eager, recompute, device):
    """Also with `recompute` (packs or rows run apart, recomputed in the backward): the same scores and gradients."""
    if eager and architecture == "gpt_neo":
        pytest.skip("GPT-Neo's attention is eager only")
    (scores, grads), (expected_scores, expected_grads) = scores_and_gradients(
        architecture, char_tokenizer, precision, eager, device, recompute
    )
    tolerance = TOLERANCES[precision]
    for name, score in scores.items():  # 0 at padding, as the reference is made to be
        torch.testing.assert_close(
            score,
            expected_scores[name],
            atol=tolerance["atol"],
            rtol=tolerance["rtol"],
            msg=lambda message, name=name: f"{name}: {message}",
        )
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        scale = float(expected_grads[name].abs().max())
        torch.testing.assert_close(
            grad,
            expected_grads[name],
            atol=tolerance["grad"] * scale,
            rtol=tolerance["grad"],
            msg=lambda message, name=name: f"{name}: {message}",
        )
    assert any(grad.abs().sum() > 0 for name, grad in grads.items() if name.startswith("model.")), "no gradient"


def test_each_family_takes_the_path_its_test_proves(architecture, char_tokenizer, monkeypatch):
    model = tiny_model(architecture, char_tokenizer)
    taken = []
    for path in ("_packed_states", "_row_states"):
        states = getattr(scoring, path)
        monkeypatch.setattr(scoring, path, lambda *args, path=path, states=states: taken.append(path) or states(*args))
    with torch.no_grad():
        ours(model, new_head(model), *inputs(model.config.vocab_size))
    assert attention_paths(model).fast == (architecture in FAST)
    assert taken == ["_packed_states" if architecture in FAST else "_row_states"]


def test_the_packs_share_rows_at_offsets():
    fed = [length - 1 for length in LENGTHS]
    packs, offsets = pack_rows(fed, balanced_budget(fed, PACK_TOKENS))
    assert (packs, offsets) == ([0, 0, 0, 0, 0, 1, 1, 2], [0, 2, 2, 5, 6, 0, 5, 0])


@pytest.mark.parametrize("architecture", ["gpt_neo", "qwen2", "mistral"])
def test_the_packed_path_would_be_wrong_for_a_windowed_family(architecture, char_tokenizer, monkeypatch):
    """Why these architectures take the plain path: forced onto the packed one, their windows count pack slots
    (GPT-Neo: silently wrong log-probs) or cut the shared prompt's cache (Qwen2, Mistral: an error)."""
    model = tiny_model(architecture, char_tokenizer)
    monkeypatch.setattr(scoring, "attention_paths", lambda model: AttentionPaths(architecture, fast=True))
    head = new_head(model)
    with torch.no_grad():
        try:
            logprobs = ours(model, head, *inputs(model.config.vocab_size))[0]
        except RuntimeError:
            return
        expected = full_forward_per_row(model, head, *inputs(model.config.vocab_size))[0]
    assert (logprobs - expected).abs().max() > 0.1


@pytest.mark.parametrize("architecture", ["llama", "mistral"])  # the packed path and the plain one
def test_recompute_keeps_a_fraction_of_the_activations_for_the_backward(architecture, char_tokenizer):
    """What the forward saves for the backward, in bytes of activations (not the weights): with `recompute`, the
    prompt's and the last hidden states, not the packs' (rows') own, here 6 times the prompt's tokens."""
    model = tiny_model(architecture, char_tokenizer)
    head = new_head(model)

    def saved(recompute: bool) -> int:
        return saved_activation_bytes(
            [model, head], lambda: ours(model, head, *long_actions(model), recompute=recompute)
        )

    assert saved(recompute=True) < 0.3 * saved(recompute=False)


def test_the_setter_module_recomputes_when_its_config_says(tiny_llama):
    def saved(recompute: bool) -> int:
        module = setter_module(copy.deepcopy(tiny_llama), recompute_activations=recompute)
        return saved_activation_bytes([module], lambda: module.score(*long_actions(tiny_llama)))

    assert saved(recompute=True) < 0.3 * saved(recompute=False)


def long_actions(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A prompt (P,) and 8 rows of actions (8, T) with 6 times its tokens in all, every one real."""
    generator = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, model.config.vocab_size, (PROMPT_LENGTH,), generator=generator)
    action_ids = torch.randint(3, model.config.vocab_size, (8, 6 * PROMPT_LENGTH // 8), generator=generator)
    return prompt_ids, action_ids, torch.ones(action_ids.shape)


def setter_module(policy: nn.Module, recompute_activations: bool = False) -> SetterPPOModule:
    return SetterPPOModule(
        policy=policy,
        frozen=None,
        ppo=PPOConfig(),
        recompute_activations=recompute_activations,
        temperature=TEMPERATURE,
        value_hidden=16,
        detach_value_trunk=True,
        identity={},
    )


def test_an_unchecked_model_type_is_refused_in_one_line(char_tokenizer):
    model = OPTForCausalLM(
        OPTConfig(
            vocab_size=len(char_tokenizer),
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            word_embed_proj_dim=32,
            max_position_embeddings=64,
        )
    )
    prompt_ids, action_ids, mask = inputs(len(char_tokenizer))
    for refuse in (
        lambda: score_actions(model, prompt_ids, action_ids, mask, TEMPERATURE),
        lambda: setter_module(model),
    ):
        with pytest.raises(UnsupportedModel, match="model type 'opt'") as refusal:
            refuse()
        assert "\n" not in str(refusal.value)


def test_lora_on_the_output_layer_is_refused_in_one_line(tiny_llama):
    """Scoring projects the hidden states onto the vocabulary itself: an output layer that is not a plain Linear
    (LoRA on lm_head) would be skipped silently, so it is refused, by the module before any sampling."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(tiny_llama), LoraConfig(r=2, target_modules=["lm_head"]))
    for refuse in (
        lambda: score_actions(model, *inputs(tiny_llama.config.vocab_size), TEMPERATURE),
        lambda: setter_module(model),
    ):
        with pytest.raises(ValueError, match="plain nn.Linear output layer") as refusal:
            refuse()
        assert "\n" not in str(refusal.value)


def test_the_packs_attention_is_the_same_with_shared_and_with_copied_key_value_heads():
    """The CPU reads each key/value head from its group of query heads; other devices copy the heads as Transformers
    does. Both against a naive softmax per query head, with a mask that hides some slots."""
    generator = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(2, heads, 5, 8, generator=generator) for heads in (6, 2, 2))
    mask = torch.rand(2, 1, 5, 5, generator=generator) > 0.3
    mask[..., 0] = True  # every query sees a slot
    expected = torch.empty(2, 5, 6, 8)
    for b in range(2):
        for h in range(6):
            scores = (query[b, h] @ key[b, h // 3].T / 8**0.5).masked_fill(~mask[b, 0], float("-inf"))
            expected[b, :, h] = scores.softmax(-1) @ value[b, h // 3]
    for share_heads in (True, False):
        output, _ = scoring._packed_sdpa(query, key, value, mask, 0.0, None, share_heads=share_heads)
        torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
