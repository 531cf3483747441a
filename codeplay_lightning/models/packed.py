"""Linear layers served from weights prepacked for the CPU's matmul library while a model samples.

`F.linear` on the CPU hands the matmul library the weight in PyTorch's row-major layout at every call, and the
library reorders it into its own blocked layout each time. At the decode shapes (64 rows × 576 × 1,536 for
SmolLM2-135M) that reordering is a large part of the call: prepacked once, a bf16 linear ran 1.3-2× faster
on an AMX Xeon (oneDNN) and an fp32 one 1.2-1.5× (MKL), with the same results. Sampling runs hundreds of
forwards on weights that do not change meanwhile, so `packed_linears` packs every linear layer once for the
duration and restores the plain forward after it (the Setter's weights change between its samplings).

Only on the CPU, for bf16 (the weights', or autocast's) and fp32 compute: elsewhere the model is left as it is.
`tests/unit/models/test_packed.py` checks each packed layer against `F.linear`, and the model matrix runs sampling
on it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch
from torch import nn

ROWS_HINT = 64  # the batch the libraries plan the blocked layout for: sampling's rows
Result = TypeVar("Result")


@contextmanager
def packed_linears(model: nn.Module) -> Iterator[None]:
    """Every `nn.Linear` of `model` runs from a packed copy of its weight in the dtype it computes in, for the
    duration; a no-op off the CPU or where no packing library serves that dtype. The weights must not change
    inside the context (sampling runs under `torch.no_grad`)."""
    linears = [module for module in model.modules() if isinstance(module, nn.Linear)]
    dtype = _compute_dtype(linears[0].weight) if linears else None
    if dtype is None:
        yield
        return
    for linear in linears:
        linear.forward = _PackedForward(linear, dtype)
    try:
        yield
    finally:
        for linear in linears:
            del linear.forward  # the class's own forward again


def with_packed_linears(function: Callable[..., Result]) -> Callable[..., Result]:
    """`function(model, ...)` runs inside `packed_linears(model)`."""

    @functools.wraps(function)
    def packed(model: nn.Module, *args, **kwargs) -> Result:
        with packed_linears(model):
            return function(model, *args, **kwargs)

    return packed


def _compute_dtype(weight: torch.Tensor) -> torch.dtype | None:
    """The dtype a linear on `weight` computes in now, when a CPU library can pack it; else None."""
    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return None
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else weight.dtype
    if dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return dtype
    if dtype == torch.float32 and torch.backends.mkl.is_available():
        return dtype
    return None


class _PackedForward:
    """`F.linear(x, weight, bias)` of one layer, from its weight packed in `dtype`: oneDNN's layout for bf16, MKL's
    for fp32. Inputs are cast to `dtype` as autocast would; the output has that dtype."""

    def __init__(self, linear: nn.Linear, dtype: torch.dtype):
        weight = linear.weight.detach().to(dtype)
        self.dtype, self.out_features = dtype, linear.out_features
        self.bias = None if linear.bias is None else linear.bias.detach().to(dtype)
        if dtype == torch.bfloat16:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT)
        else:
            self.packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, ROWS_HINT)
            self.weight = weight  # MKL's kernel takes the plain weight too

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            raise RuntimeError("packed linear layers serve sampling only: no gradient flows through them")
        rows = x.reshape(-1, x.shape[-1]).to(self.dtype)
        if self.dtype == torch.bfloat16:
            output = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")
        else:
            output = torch.ops.mkl._mkl_linear(rows, self.packed, self.weight, self.bias, ROWS_HINT)
        return output.view(*x.shape[:-1], self.out_features)
