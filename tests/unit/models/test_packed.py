"""Linear layers from prepacked weights against `F.linear`, and sampling with them against sampling without."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from model_architectures import tiny_model
from support import generators

from codeplay_lightning.models.packed import packed_linears
from codeplay_lightning.models.sampling import SamplingConfig, sample, sample_streams

PACKABLE = [torch.float32, torch.bfloat16]
# whether this CPU's libraries pack the dtype: oneDNN packs bf16 only with AVX-512 (or AMX), so not on an AVX2-only host
PACKED_HERE = {
    torch.float32: torch.backends.mkldnn.is_available() and torch.backends.mkl.is_available(),
    torch.bfloat16: torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported(),
}


@pytest.mark.parametrize("dtype", PACKABLE)
@pytest.mark.parametrize("rows", [1, 7, 64, 333])
@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_layer_computes_what_f_linear_does(dtype, rows, bias):
    generator = torch.Generator().manual_seed(rows)
    linear = torch.nn.Linear(96, 80, bias=bias).to(dtype)
    inputs = torch.randn(2, rows, 96, generator=generator).to(dtype)
    with torch.no_grad():
        expected = F.linear(inputs, linear.weight, linear.bias)
        with packed_linears(linear):
            assert ("forward" in vars(linear)) == PACKED_HERE[dtype]  # the packed forward ran, where it can
            output = linear(inputs)
    assert output.dtype == dtype
    torch.testing.assert_close(output, expected, atol=0, rtol=0)


def test_under_bf16_autocast_a_float32_layer_is_packed_in_bf16_as_autocast_casts_it():
    linear = torch.nn.Linear(96, 80)
    inputs = torch.randn(5, 96, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = linear(inputs)
        with packed_linears(linear):
            output = linear(inputs)
    assert output.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(output, expected, atol=0, rtol=0)


def test_the_plain_forward_comes_back_even_after_an_error():
    linear = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError), torch.no_grad(), packed_linears(linear):
        raise ValueError("boom")
    assert "forward" not in vars(linear)


def test_a_dtype_no_library_packs_is_left_alone():
    linear = torch.nn.Linear(4, 4).to(torch.float16)
    with packed_linears(linear):
        assert "forward" not in vars(linear)


def test_no_gradient_flows_through_a_packed_layer():
    linear = torch.nn.Linear(4, 4)
    with packed_linears(linear), pytest.raises(RuntimeError, match="sampling only"):
        linear(torch.randn(2, 4, requires_grad=True))


@pytest.mark.parametrize("dtype", PACKABLE)
def test_sampling_is_the_same_with_and_without_packed_layers(char_tokenizer, dtype):
    """Same tokens and the same log-probs: packing changes how the weights are laid out, not what is computed."""
    model = tiny_model("llama", char_tokenizer).to(dtype)
    prompts = ["def f(x: int):\n    return x", "def g():\n    return 'a", "def g():\n    return 'a"]
    config = SamplingConfig(12, 0.9, stop_strings=(")",))

    def both(prompts_sampler, streams_sampler):
        return (
            prompts_sampler(model, char_tokenizer, prompts, config, generators([1, 2, 3])),
            streams_sampler(model, char_tokenizer, prompts[0], 20, config, generators([4, 5])),
        )

    with_packing = both(sample, sample_streams)
    with torch.no_grad():  # the samplers without their decorators: the model's own linear layers
        without = both(inspect.unwrap(sample), inspect.unwrap(sample_streams))
    for ours, plain in zip(with_packing, without):
        assert [ids.tolist() for ids in ours.token_ids] == [ids.tolist() for ids in plain.token_ids]
        for a, b in zip(ours.logprobs, plain.logprobs):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
