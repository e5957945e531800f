"""A Llama RMSNorm computed inside the float8 cast of the product it feeds (`fp8-trainperf-all`).

Compiled, a decoder layer adds the residual and normalises in one Inductor kernel that writes the
normalised tensor in bf16, and trainperf's cast (kernels/float8_mlp.py) reads it back to write its
float8 copy and that copy's transpose. Here one kernel does both: it adds the residual (writing the
sum, the next residual stream), takes each row's 1/rms, and writes the normalised rows as float8
with their transpose and amax, so the bf16 normalised tensor never reaches memory. Its values are
LlamaRMSNorm's, rounded where LlamaRMSNorm rounds: weight · bf16(s · rsqrt(mean(s²) + eps)), in
the input's dtype. The backward is plain PyTorch (kernels/llama_rmsnorm.py), which Inductor fuses.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainperf.kernels.float8_mlp import (
    E4M3,
    STATE,
    TILE,
    WARPS,
    float8_max,
    next_scale,
    store_float8,
    with_transpose,
)
from trainperf.kernels.llama_rmsnorm import rms_norm_reference


@triton.jit
def _norm_cast_kernel(X, R, S, W, Y, YT, SCALE, AMAX, M, N, eps, HAS_RESIDUAL: tl.constexpr,
                      FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """S = X + R (with HAS_RESIDUAL; else S is X), Y = rmsnorm(S)·W·scale and YT = Yᵀ as float8,
    the amax of rmsnorm(S)·W into AMAX: BM whole rows per program, BN columns at a time."""
    scale = tl.load(SCALE)
    rows = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    row_ok = rows[:, None] < M
    squares = tl.zeros([BM], dtype=tl.float32)
    for start in range(0, N, BN):
        cols = start + tl.arange(0, BN)
        at, mask = rows[:, None] * N + cols[None, :], row_ok & (cols[None, :] < N)
        s = tl.load(X + at, mask=mask, other=0.0)
        if HAS_RESIDUAL:
            res = tl.load(R + at, mask=mask, other=0.0).to(tl.float32)
            s = (s.to(tl.float32) + res).to(S.dtype.element_ty)
            tl.store(S + at, s, mask=mask)
        s = s.to(tl.float32)
        squares += tl.sum(s * s, 1)
    rstd = tl.rsqrt(squares / N + eps)[:, None]
    if HAS_RESIDUAL:
        tl.debug_barrier()  # the sums this program's threads stored are read back below
    amax = tl.zeros([BM, BN], dtype=tl.float32)
    for start in range(0, N, BN):
        cols = start + tl.arange(0, BN)
        at, mask = rows[:, None] * N + cols[None, :], row_ok & (cols[None, :] < N)
        s = tl.load(S + at if HAS_RESIDUAL else X + at, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        normed = (s * rstd).to(X.dtype.element_ty).to(tl.float32)
        n = (w * normed).to(X.dtype.element_ty).to(tl.float32)
        amax = tl.maximum(amax, tl.where(mask, tl.abs(n), 0.0))
        store_float8(n, Y, at, mask, scale, FMAX)
    tl.atomic_max(AMAX, tl.max(tl.max(amax, 1), 0))
    tl.debug_barrier()  # the float8 rows this program's threads stored are read back transposed
    for start in range(0, N, BN):
        r, c = rows[None, :], start + tl.arange(0, BN)[:, None]
        tmask = (r < M) & (c < N)
        tl.store(YT + c * M + r, tl.load(Y + r * N + c, mask=tmask), mask=tmask)


@torch.library.custom_op("trainperf::float8_rms_norm_cast", mutates_args=STATE)
def _norm_cast_op(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                  hist: torch.Tensor, now: torch.Tensor, scale: torch.Tensor, inv: torch.Tensor,
                  calibrated: torch.Tensor, role: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.shape
    s = torch.empty_like(x) if residual is not None else x.new_empty(0)
    next_scale(hist, now, scale, inv, calibrated, role, E4M3,
               lambda: rms_norm_reference(x if residual is None else x + residual, weight, eps))
    y, yt = with_transpose(m, n, E4M3, x.device)
    _norm_cast_kernel[(triton.cdiv(m, TILE[0]),)](
        x, residual if residual is not None else x, s, weight, y, yt, scale[role:], now[role:], m, n, eps,
        HAS_RESIDUAL=residual is not None, FMAX=float8_max(E4M3), BM=TILE[0], BN=TILE[1], num_warps=WARPS)
    return s, y, yt


@_norm_cast_op.register_fake
def _(x, residual, weight, eps, hist, now, scale, inv, calibrated, role):  # noqa: ANN001, ANN202
    s = torch.empty_like(x) if residual is not None else x.new_empty(0)
    return (s, *with_transpose(*x.shape, E4M3, x.device))
