"""A decoder layer's second half on float8 GEMMs, its RMSNorm and residual adds in trainperf's own
kernels: out = s + mlp(rmsnorm(s)), s = x + attn. `norm_cast`, the same kernel without the add,
casts the normed input of the float8 q, k and v product (kernels/float8_linear.py).

Compiled by Inductor, the norm before the MLP is a kernel of the residual add and the norm that
writes the bf16 normed input, which the MLP's cast (kernels/float8_mlp.py) then reads back. Here
one kernel adds, normalizes and casts, writing s, the float8 input with its transpose and 1/rms,
never the bf16 normed input. In the backward the norm's gradient comes from the norm's own kernel
(kernels/rmsnorm.py), which adds the residual's gradient as it goes. The norm rounds as
transformers' LlamaRMSNorm does (the normed row to bf16, times the bf16 weight to bf16).

  forward   s = x + attn;  s → x8, x8ᵀ (normed, cast), rstd;  out = s + mlp(x8)
  backward  dx8 = mlp'(dout);  ds = dout + rmsnorm'(dx8; s, rstd, w)  (for x and attn both)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainperf.kernels.float8_mlp import (
    E4M3,
    STATE,
    ScaleState,
    X,
    as_dtype,
    check_tokens,
    float8_max,
    mlp_backward,
    mlp_forward,
    next_scale,
    store_float8,
    transpose_back,
    with_transpose,
)
from trainperf.kernels.rmsnorm import rmsnorm_backward_op

# Rows of a program and columns of its chunks, and warps: the fastest of four tiles for the norm and
# cast without the add, at Llama-3.2-1B's width and 12288-16384 tokens
# (benchmarks/probes/float8_norm_cast.py)
NORM_TILE, NORM_WARPS = (64, 128), 8


def rms_norm_reference(s: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward, which the kernel rounds as."""
    h = s.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(s.dtype)


@triton.jit
def _add_norm_cast_kernel(X, B, S, W, Y, YT, RSTD, SCALE, AMAX, M, N, eps, FMAX: tl.constexpr,
                          BM: tl.constexpr, BN: tl.constexpr, HAS_B: tl.constexpr):
    """S = X + B; Y = rmsnorm(S)·W·scale and YT = Yᵀ as float8; 1/rms into RSTD, the amax into AMAX.
    Without B (HAS_B false) S is X, which the caller passes as S too. A program takes BM whole rows
    in BN-wide chunks: the sums of squares first, then the normed chunks (S read back, mostly from
    L2)."""
    scale = tl.load(SCALE)
    row = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    rows, cols = row[:, None], tl.arange(0, BN)[None, :]
    DTYPE: tl.constexpr = X.dtype.element_ty
    squares = tl.zeros([BM, BN], tl.float32)
    for c0 in range(0, N, BN):
        mask = (rows < M) & (c0 + cols < N)
        at = rows * N + c0 + cols
        s = tl.load(X + at, mask=mask, other=0.0)
        if HAS_B:
            s = (s + tl.load(B + at, mask=mask, other=0.0)).to(DTYPE)
            tl.store(S + at, s, mask=mask)
        s = s.to(tl.float32)
        squares += s * s
    rstd = tl.rsqrt(tl.sum(squares, 1) / N + eps)
    tl.store(RSTD + row, rstd, mask=row < M)
    top = tl.zeros([BM, BN], tl.float32)
    for c0 in range(0, N, BN):
        mask = (rows < M) & (c0 + cols < N)
        s = tl.load(S + rows * N + c0 + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + c0 + cols, mask=c0 + cols < N, other=0.0).to(tl.float32)
        y = (w * (s * rstd[:, None]).to(DTYPE).to(tl.float32)).to(DTYPE).to(tl.float32)
        top = tl.maximum(top, tl.abs(y))
        store_float8(y, Y, rows * N + c0 + cols, mask, scale, FMAX)
        transpose_back(Y + c0, YT + c0 * M, M, N - c0, N, M, BM, BN)  # a 1-D grid: program_id(1) is 0
    tl.atomic_max(AMAX, tl.max(tl.max(top, 1), 0), sem="relaxed")


def _launch(x: torch.Tensor, b: torch.Tensor | None, s: torch.Tensor, weight: torch.Tensor, eps: float,
            state: tuple[torch.Tensor, ...], role: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The norm's cast of s (= x + b, written into s, where b is given; else s is x) at `role`'s
    next scale: the float8 y, its transpose and 1/rms of each row."""
    now, scale = state[1], state[2]
    next_scale(*state, role, E4M3, lambda: rms_norm_reference(x if b is None else x + b, weight, eps))
    m, n = x.shape
    y, yt = with_transpose(m, n, E4M3, x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    _add_norm_cast_kernel[(triton.cdiv(m, NORM_TILE[0]),)](
        x, x if b is None else b, s, weight, y, yt, rstd, scale[role:], now[role:], m, n, eps,
        FMAX=float8_max(E4M3), BM=NORM_TILE[0], BN=NORM_TILE[1], HAS_B=b is not None, num_warps=NORM_WARPS)
    return y, yt, rstd


@torch.library.custom_op("trainperf::float8_add_norm_cast", mutates_args=STATE)
def _add_norm_cast_op(x: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, eps: float, hist: torch.Tensor,
                      now: torch.Tensor, scale: torch.Tensor, inv: torch.Tensor, calibrated: torch.Tensor,
                      role: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    s = torch.empty_like(x)
    return s, *_launch(x, b, s, weight, eps, (hist, now, scale, inv, calibrated), role)


@_add_norm_cast_op.register_fake
def _(x, b, weight, eps, hist, now, scale, inv, calibrated, role):  # noqa: ANN001, ANN202
    return torch.empty_like(x), *_norm_cast_fake(x)


def _norm_cast_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return *with_transpose(*x.shape, E4M3, x.device), x.new_empty(x.shape[0], dtype=torch.float32)


def add_norm_cast(x: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, eps: float, state: ScaleState,
                  role: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """s = x + b [tokens, features], rmsnorm(s)·weight as e4m3 at `role`'s scale with its transpose,
    and 1/rms of each row, in one pass."""
    return _add_norm_cast_op(x, b, weight, float(eps), *state.tensors(), role)


@torch.library.custom_op("trainperf::float8_norm_cast", mutates_args=STATE)
def _norm_cast_op(x: torch.Tensor, weight: torch.Tensor, eps: float, hist: torch.Tensor, now: torch.Tensor,
                  scale: torch.Tensor, inv: torch.Tensor, calibrated: torch.Tensor,
                  role: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _launch(x, None, x, weight, eps, (hist, now, scale, inv, calibrated), role)


@_norm_cast_op.register_fake
def _(x, weight, eps, hist, now, scale, inv, calibrated, role):  # noqa: ANN001, ANN202
    return _norm_cast_fake(x)


def norm_cast(x: torch.Tensor, weight: torch.Tensor, eps: float, state: ScaleState,
              role: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rmsnorm(x)·weight [tokens, features] as e4m3 at `role`'s scale with its transpose, and 1/rms
    of each row, in one pass: add_norm_cast without the add."""
    return _norm_cast_op(x, weight, float(eps), *state.tensors(), role)


class _Float8ResidualMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, attn, norm_weight, w_gu, w_d, state, eps):  # noqa: ANN001, ANN205
        shape = x.shape
        s, x8, x8t, rstd = add_norm_cast(x.reshape(-1, shape[-1]).contiguous(),
                                         attn.reshape(-1, shape[-1]).contiguous(), norm_weight, eps, state, X)
        y, saved = mlp_forward(ctx, x8, x8t, w_gu, w_d, state)
        ctx.save_for_backward(s, norm_weight, rstd, *saved)
        ctx.shape = shape
        return (s + as_dtype(y, s.dtype)).view(shape)

    @staticmethod
    def backward(ctx, d_out):  # noqa: ANN001, ANN205
        s, norm_weight, rstd, *saved = ctx.saved_tensors
        d_out = d_out.reshape(-1, d_out.shape[-1]).contiguous()
        dx8, grad_w_gu, grad_w_d = mlp_backward(ctx, tuple(saved), d_out)
        ds, grad_norm = rmsnorm_backward_op(dx8, s, norm_weight, rstd, d_out)
        ds = ds.view(ctx.shape)
        return ds, ds, grad_norm, grad_w_gu, grad_w_d, None, None


def float8_residual_mlp(x: torch.Tensor, attn: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                        w_gu: torch.Tensor, w_d: torch.Tensor, state: ScaleState) -> torch.Tensor:
    """s + mlp(rmsnorm(s)·norm_weight) with s = x + attn: a Llama decoder layer after its attention,
    the MLP trainperf's float8 one (kernels/float8_mlp.py float8_mlp) and the norm and adds fused
    around it."""
    check_tokens(x)
    return _Float8ResidualMLP.apply(x, attn, norm_weight, w_gu, w_d, state, float(eps))
