"""A Linear's products on float8 GEMMs with delayed scaling: the attention projections of
`--float8 trainperf-all` (models/hf_llama.py float8_attention).

The same casts and scales as trainperf's float8 MLP (kernels/float8_mlp.py): each tensor is cast
once with its transpose beside it, at a scale from the largest amax of its last iterations;
activations and weights e4m3, the output's gradient e5m2, fast accumulation in the forward, and in
the backward where float8_mlp.FAST_BACKWARD says.

  forward   x → x8, x8ᵀ;  W → W8, W8ᵀ;  y = x8·W8ᵀ
  backward  dy → dy8, dy8ᵀ;  dx = dy8·W8;  dW = dy8ᵀ·x8

A layer's q, k and v projections are one such product on their stacked weights, so their input is
cast once. With RoPE inside it (float8_qkv_rope) the product's forward rotates q and k as
transformers' Llama does, and its backward takes q's and k's gradients back through the rotation,
stacks them with v's and casts them with the transpose in one kernel, a program per tile of one
head, so that the stacked bf16 gradient is never written for the cast to read again; the forward's
rotation of q and k is one kernel too (rope_qk), reading each element of the product's output once.
In a decoder layer with trainperf's norms (float8_norm_qkv_rope) the RMSNorm before the product is
fused into its input's cast, so that the normed bf16 input is never written either.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainperf.kernels import float8_mlp, stores_right
from trainperf.kernels.float8_mlp import (
    E4M3,
    E5M2,
    STATE,
    TILE,
    WARPS,
    ScaleState,
    as_dtype,
    atomic_amax,
    cast_transposed,
    check_tokens,
    float8_max,
    next_scale,
    scaled_mm,
    store_float8,
    transpose_back,
)
from trainperf.kernels.float8_norm import norm_cast
from trainperf.kernels.rmsnorm import rmsnorm_backward_op

# The tensors with a scale each, by their row in a Linear's scale state.
IN, WEIGHT, GRAD = range(3)
ROLES = 3


def _cast_input(x: torch.Tensor, state: ScaleState) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., in] as e4m3 [tokens, in] with its transpose."""
    return cast_transposed(x.reshape(-1, x.shape[-1]).contiguous(), state, IN, E4M3)


def _forward_product(x8: torch.Tensor, weight: torch.Tensor, state: ScaleState
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """x8 · weightᵀ as bf16 [tokens, out] (x8 the cast input), and the transposed float8 weight the
    backward's product takes."""
    w8, w8t = cast_transposed(weight, state, WEIGHT, E4M3)
    return scaled_mm(x8, w8, state, IN, WEIGHT, fast=True), w8t


def _save(ctx, x: torch.Tensor, weight: torch.Tensor, state: ScaleState, *saved: torch.Tensor) -> None:  # noqa: ANN001
    ctx.save_for_backward(*saved)
    ctx.state, ctx.shape, ctx.dtypes = state, x.shape, (x.dtype, weight.dtype)
    ctx.fast = float8_mlp.FAST_BACKWARD


def _input_and_weight_grads(ctx, dy8: torch.Tensor, dy8t: torch.Tensor, x8t: torch.Tensor,  # noqa: ANN001
                            w8t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dx = scaled_mm(dy8, w8t, ctx.state, GRAD, WEIGHT, ctx.fast)
    grad_weight = scaled_mm(dy8t, x8t, ctx.state, GRAD, IN, ctx.fast)
    return as_dtype(dx.reshape(ctx.shape), ctx.dtypes[0]), as_dtype(grad_weight, ctx.dtypes[1])


class _Float8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, state):  # noqa: ANN001, ANN205
        x8, x8t = _cast_input(x, state)
        y, w8t = _forward_product(x8, weight, state)
        _save(ctx, x, weight, state, x8t, w8t)
        return as_dtype(y.reshape(*x.shape[:-1], y.shape[-1]), x.dtype)

    @staticmethod
    def backward(ctx, dy):  # noqa: ANN001, ANN205
        dy8, dy8t = cast_transposed(dy.reshape(-1, dy.shape[-1]).contiguous(), ctx.state, GRAD, E5M2)
        return *_input_and_weight_grads(ctx, dy8, dy8t, *ctx.saved_tensors), None


def float8_linear(x: torch.Tensor, weight: torch.Tensor, state: ScaleState) -> torch.Tensor:
    """x · weightᵀ on float8 GEMMs, scaled from `state` (a ScaleState of ROLES roles)."""
    check_tokens(x)
    return _Float8Linear.apply(x, weight, state)


def linear_state(weight: torch.Tensor) -> ScaleState:
    """A fresh scale state for a float8 Linear with this weight."""
    return ScaleState(weight.device, ROLES)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' Llama rotate_half: [x1, x2] → [−x2, x1] over the last dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def qkv_rope_grad_reference(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                            sin: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The gradient of the stacked q|k|v product's output [batch·seq, (Hq + 2·Hk)·D] in `dtype`,
    from the gradients of RoPE's q and k and of v ([batch, seq, heads, D]; cos, sin
    [batch or 1, seq, D] with repeated halves): q's and k's taken back through the rotation,
    [dx1, dx2] = [dy1·cos + dy2·sin, dy2·cos − dy1·sin]."""
    c, s = cos.to(dtype).unsqueeze(2), sin.to(dtype).unsqueeze(2)

    def back(g: torch.Tensor) -> torch.Tensor:
        z1, z2 = (g.to(dtype) * s).chunk(2, dim=-1)
        return g.to(dtype) * c + torch.cat((z2, -z1), dim=-1)

    b, t = dq.shape[:2]
    return torch.cat([back(dq), back(dk), dv.to(dtype)], dim=2).reshape(b * t, -1)


@triton.jit
def _head_tile(M, SEQ, HALF: tl.constexpr, BM: tl.constexpr):
    """A program's BM rows (tokens) of one head, taken as its two halves: the rows, each row's
    batch and position, the columns of a half and the mask of rows past M."""
    rows = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    j = tl.arange(0, HALF)[None, :]
    return rows, rows // SEQ, rows % SEQ, j, (rows < M)[:, None] & (j < HALF)


@triton.jit
def _angles(COS, SIN, b, s, j, mask, scb, scs):
    """cos and sin of the tile's rows (those of batch b and position s at b·scb + s·scs), a half's
    columns: their halves repeat."""
    cs = (b * scb + s * scs)[:, None] + j
    cos = tl.load(COS + cs, mask=mask, other=0.0).to(tl.float32)
    return cos, tl.load(SIN + cs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _qkv_rope_grad_kernel(DQ, DK, DV, COS, SIN, Y, YT, SCALE, AMAX, M, N, SEQ, HQ, HK,
                          sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, scb, scs, D: tl.constexpr,
                          FMAX: tl.constexpr, BM: tl.constexpr):
    """Y [M, N] = [dq | dk | dv] with dq and dk taken back through RoPE, cast, and YT = Yᵀ; the
    amax into AMAX. A program takes BM rows of one head (program_id(1)), as its two halves."""
    HALF: tl.constexpr = D // 2
    scale = tl.load(SCALE)
    head = tl.program_id(1)
    rows, b, s, j, mask = _head_tile(M, SEQ, HALF, BM)
    if head < HQ:
        at = DQ + (b * sqb + s * sqs + head * sqh)[:, None] + j
    elif head < HQ + HK:
        at = DK + (b * skb + s * sks + (head - HQ) * skh)[:, None] + j
    else:
        at = DV + (b * svb + s * svs + (head - HQ - HK) * svh)[:, None] + j
    g1 = tl.load(at, mask=mask, other=0.0).to(tl.float32)
    g2 = tl.load(at + HALF, mask=mask, other=0.0).to(tl.float32)
    if head < HQ + HK:  # q and k went through RoPE: the rotation by −θ takes their gradients back
        cos, sin = _angles(COS, SIN, b, s, j, mask, scb, scs)
        g1, g2 = g1 * cos + g2 * sin, g2 * cos - g1 * sin
    atomic_amax(AMAX, tl.maximum(tl.abs(g1), tl.abs(g2)), mask)
    out = rows[:, None] * N + head * D + j
    store_float8(g1, Y, out, mask, scale, FMAX)
    store_float8(g2, Y, out + HALF, mask, scale, FMAX)
    transpose_back(Y, YT, M, N, N, M, BM, D)


def rope_grad_cast_takes(head_dim: int) -> bool:
    """Whether the kernel casting the stacked gradient through RoPE takes heads of this dimension:
    its programs hold a head's halves as tiles, whose sides Triton takes as powers of two."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


@torch.library.custom_op("trainperf::float8_qkv_rope_grad", mutates_args=STATE)
def _qkv_rope_grad_op(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                      sin: torch.Tensor, hist: torch.Tensor, now: torch.Tensor, scale: torch.Tensor,
                      inv: torch.Tensor, calibrated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, t, hq, d = dq.shape
    if not rope_grad_cast_takes(d):
        raise ValueError(f"RoPE inside the float8 q, k and v product takes heads of a power-of-two "
                         f"dimension of at least 16, not {d}")
    state = (hist, now, scale, inv, calibrated)
    next_scale(*state, GRAD, E5M2, lambda: qkv_rope_grad_reference(dq, dk, dv, cos, sin))
    dq, dk, dv, cos, sin = map(_unit_last, (dq, dk, dv, cos, sin))
    y, yt = float8_mlp.with_transpose(b * t, (hq + 2 * dk.shape[2]) * d, E5M2, dq.device)
    launch_rope_grad_cast(dq, dk, dv, cos, sin, y, yt, scale[GRAD:], now[GRAD:])
    return y, yt


def launch_rope_grad_cast(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                          sin: torch.Tensor, y: torch.Tensor, yt: torch.Tensor, scale: torch.Tensor,
                          amax: torch.Tensor, rows: int = TILE[0], warps: int = WARPS) -> None:
    """The kernel of the stacked gradient's cast through RoPE into y and yt (scale[0] and amax[0]
    the cast's), `rows` rows of a head a program."""
    b, t, hq, d = dq.shape
    hk = dk.shape[2]
    _qkv_rope_grad_kernel[triton.cdiv(b * t, rows), hq + 2 * hk](
        dq, dk, dv, cos, sin, y, yt, scale, amax, b * t, (hq + 2 * hk) * d, t, hq, hk,
        *dq.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], cos.stride(0) if cos.shape[0] > 1 else 0,
        cos.stride(1), D=d, FMAX=float8_max(E5M2), BM=rows, num_warps=warps)


@_qkv_rope_grad_op.register_fake
def _(dq, dk, dv, cos, sin, hist, now, scale, inv, calibrated):  # noqa: ANN001, ANN202
    b, t, hq, d = dq.shape
    return float8_mlp.with_transpose(b * t, (hq + 2 * dk.shape[2]) * d, E5M2, dq.device)


@triton.jit
def _rope_qk_kernel(QKV, COS, SIN, Q, K, M, N, SEQ, HQ, HK, scb, scs, D: tl.constexpr, BM: tl.constexpr):
    """Q [M, HQ·D] and K [M, HK·D]: the first HQ + HK heads of QKV [M, N] rotated by RoPE (cos, sin
    with repeated halves; those of row r = b·SEQ + s at b·scb + s·scs). A program takes BM rows of
    one head (program_id(1)), as its two halves, each element read once."""
    HALF: tl.constexpr = D // 2
    head = tl.program_id(1)
    rows, b, s, j, mask = _head_tile(M, SEQ, HALF, BM)
    at = QKV + rows[:, None] * N + head * D + j
    x1 = tl.load(at, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(at + HALF, mask=mask, other=0.0).to(tl.float32)
    cos, sin = _angles(COS, SIN, b, s, j, mask, scb, scs)
    if head < HQ:
        out = Q + rows[:, None] * (HQ * D) + head * D + j
    else:
        out = K + rows[:, None] * (HK * D) + (head - HQ) * D + j
    tl.store(out, (x1 * cos - x2 * sin).to(Q.dtype.element_ty), mask=mask)
    tl.store(out + HALF, (x2 * cos + x1 * sin).to(Q.dtype.element_ty), mask=mask)


ROPE_ROWS, ROPE_WARPS = TILE[0], WARPS  # rows of a head a program of _rope_qk_kernel takes, its warps


@torch.library.custom_op("trainperf::float8_rope_qk", mutates_args=())
def _rope_qk_op(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: int, hq: int,
                hk: int) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = qkv.shape
    q, k = _rope_qk_outputs(qkv, batch, hq, hk)
    cos, sin = _unit_last(cos), _unit_last(sin)
    _rope_qk_kernel[triton.cdiv(m, ROPE_ROWS), hq + hk](
        qkv, cos, sin, q, k, m, n, q.shape[1], hq, hk, cos.stride(0) if cos.shape[0] > 1 else 0,
        cos.stride(1), D=q.shape[3], BM=ROPE_ROWS, num_warps=ROPE_WARPS)
    return q, k


def _rope_qk_outputs(qkv: torch.Tensor, batch: int, hq: int, hk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty q and k [batch, seq, heads, D] for the rotation of the product's output qkv."""
    m, n = qkv.shape
    return tuple(qkv.new_empty(batch, m // batch, h, n // (hq + 2 * hk)) for h in (hq, hk))


@_rope_qk_op.register_fake
def _(qkv, cos, sin, batch, hq, hk):  # noqa: ANN001, ANN202
    return _rope_qk_outputs(qkv, batch, hq, hk)


def rope_qk(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: int,
            heads: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k [batch, seq, heads, D], rotated by RoPE, from the stacked q, k and v product's output
    qkv [batch·seq, (Hq + 2·Hk)·D] in one kernel (cos, sin [batch or 1, seq, D] with repeated halves,
    as transformers' Llama makes them), computed in float32 and rounded once."""
    return _rope_qk_op(qkv, cos, sin, batch, heads[0], heads[1])


def _rotated_qkv(x8: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 state: ScaleState, heads: tuple[int, int, int], shape: torch.Size, dtype: torch.dtype,
                 kernel: bool) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """q, k and v in `dtype` from the product of the cast input x8 (of an x of `shape`: batch, seq,
    features), q and k rotated by RoPE (by rope_qk where `kernel` says and it takes the product,
    else as transformers writes it, for Inductor to compile), and the transposed float8 weight the
    backward takes."""
    qkv, w8t = _forward_product(x8, weight, state)
    q, k, v = qkv.view(*shape[:-1], sum(heads), -1).split(heads, dim=-2)
    if kernel and stores_right(qkv):
        q, k = rope_qk(qkv, cos, sin, shape[0], heads)
    else:
        c, s = cos.unsqueeze(2), sin.unsqueeze(2)
        q, k = (t * c + rotate_half(t) * s for t in (q, k))
    return (as_dtype(q, dtype), as_dtype(k, dtype), as_dtype(v, dtype)), w8t


def _unrotated_grads(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, x8t: torch.Tensor,  # noqa: ANN001
                     w8t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The product's input and weight gradients from those of RoPE's q and k and of v."""
    dy8, dy8t = _qkv_rope_grad_op(dq, dk, dv, cos, sin, *ctx.state.tensors())
    return _input_and_weight_grads(ctx, dy8, dy8t, x8t, w8t)


class _Float8QKVRope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, cos, sin, state, heads, kernel):  # noqa: ANN001, ANN205
        x8, x8t = _cast_input(x, state)
        qkv, w8t = _rotated_qkv(x8, weight, cos, sin, state, heads, x.shape, x.dtype, kernel)
        _save(ctx, x, weight, state, x8t, w8t, cos, sin)
        return qkv

    @staticmethod
    def backward(ctx, dq, dk, dv):  # noqa: ANN001, ANN205
        return *_unrotated_grads(ctx, dq, dk, dv, *ctx.saved_tensors), None, None, None, None, None


def float8_qkv_rope(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    state: ScaleState, heads: tuple[int, int, int], kernel: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k and v [batch, seq, heads, D] from one float8 product of x [batch, seq, features] with the
    stacked weights of `heads` (query, key, value) heads, q and k rotated by RoPE (cos, sin [batch
    or 1, seq, D], as transformers' Llama makes them), in trainperf's kernel where `kernel` says."""
    check_tokens(x)
    return _Float8QKVRope.apply(x, weight, cos, sin, state, heads, kernel)


class _Float8NormQKVRope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, norm_weight, eps, weight, cos, sin, state, heads, kernel):  # noqa: ANN001, ANN205
        x8, x8t, rstd = norm_cast(x.reshape(-1, x.shape[-1]).contiguous(), norm_weight, eps, state, IN)
        qkv, w8t = _rotated_qkv(x8, weight, cos, sin, state, heads, x.shape, x.dtype, kernel)
        _save(ctx, x, weight, state, x8t, w8t, cos, sin, x, norm_weight, rstd)
        return *qkv, x.view_as(x)

    @staticmethod
    def backward(ctx, dq, dk, dv, d_residual):  # noqa: ANN001, ANN205
        *saved, x, norm_weight, rstd = ctx.saved_tensors
        d_normed, grad_weight = _unrotated_grads(ctx, dq, dk, dv, *saved)
        dx, grad_norm = rmsnorm_backward_op(d_normed, x, norm_weight, rstd, d_residual)
        return dx, grad_norm, None, grad_weight, None, None, None, None, None


def float8_norm_qkv_rope(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
                         cos: torch.Tensor, sin: torch.Tensor, state: ScaleState, heads: tuple[int, int, int],
                         kernel: bool = True
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """float8_qkv_rope of transformers' RMSNorm of x (its weight `norm_weight`), the norm fused into
    the input's cast (kernels/float8_norm.py norm_cast), and x to carry on as the residual stream:
    use the fourth output in place of x after, and the backward adds the residual's gradient to the
    norm's in the norm's own kernel (kernels/rmsnorm.py rmsnorm_with_skip)."""
    check_tokens(x)
    return _Float8NormQKVRope.apply(x, norm_weight, float(eps), weight, cos, sin, state, heads, kernel)
