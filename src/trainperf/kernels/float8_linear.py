"""A Linear's products on float8 GEMMs with delayed scaling: the attention projections of
`--float8 trainperf-all` (models/hf_llama.py float8_attention).

The same casts and scales as trainperf's float8 MLP (kernels/float8_mlp.py): each tensor is cast
once with its transpose beside it, at a scale from the largest amax of its last iterations;
activations and weights e4m3, the output's gradient e5m2, fast accumulation in the forward, and in
the backward where float8_mlp.FAST_BACKWARD says.

  forward   x → x8, x8ᵀ;  W → W8, W8ᵀ;  y = x8·W8ᵀ
  backward  dy → dy8, dy8ᵀ;  dx = dy8·W8;  dW = dy8ᵀ·x8

A layer's q, k and v projections are one such product on their stacked weights, so their input is
cast once.
"""

from __future__ import annotations

import torch

from trainperf.kernels import float8_mlp
from trainperf.kernels.float8_mlp import (
    E4M3,
    E5M2,
    ScaleState,
    as_dtype,
    cast_transposed,
    check_tokens,
    scaled_mm,
)

# The tensors with a scale each, by their row in a Linear's scale state.
IN, WEIGHT, GRAD = range(3)
ROLES = 3


class _Float8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, state):  # noqa: ANN001, ANN205
        shape = x.shape
        x8, x8t = cast_transposed(x.reshape(-1, shape[-1]).contiguous(), state, IN, E4M3)
        w8, w8t = cast_transposed(weight, state, WEIGHT, E4M3)
        y = scaled_mm(x8, w8, state, IN, WEIGHT, fast=True)
        ctx.save_for_backward(x8t, w8t)
        ctx.state, ctx.shape, ctx.dtypes = state, shape, (x.dtype, weight.dtype)
        ctx.fast = float8_mlp.FAST_BACKWARD
        return as_dtype(y.reshape(*shape[:-1], y.shape[-1]), x.dtype)

    @staticmethod
    def backward(ctx, dy):  # noqa: ANN001, ANN205
        x8t, w8t = ctx.saved_tensors
        state = ctx.state
        dy8, dy8t = cast_transposed(dy.reshape(-1, dy.shape[-1]).contiguous(), state, GRAD, E5M2)
        dx = scaled_mm(dy8, w8t, state, GRAD, WEIGHT, ctx.fast)
        grad_weight = scaled_mm(dy8t, x8t, state, GRAD, IN, ctx.fast)
        return as_dtype(dx.reshape(ctx.shape), ctx.dtypes[0]), as_dtype(grad_weight, ctx.dtypes[1]), None


def float8_linear(x: torch.Tensor, weight: torch.Tensor, state: ScaleState) -> torch.Tensor:
    """x · weightᵀ on float8 GEMMs, scaled from `state` (a ScaleState of ROLES roles)."""
    check_tokens(x)
    return _Float8Linear.apply(x, weight, state)


def linear_state(weight: torch.Tensor) -> ScaleState:
    """A fresh scale state for a float8 Linear with this weight."""
    return ScaleState(weight.device, ROLES)
