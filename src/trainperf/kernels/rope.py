"""Rotary position embedding (rotate-half form) as one Triton kernel each way.

For each row (batch, head, position) with halves x1, x2 and the position's cos/sin:
  forward   y1 = x1·cos − x2·sin,   y2 = x1·sin + x2·cos
  backward  the rotation by −θ:  dx1 = dy1·cos + dy2·sin,  dx2 = −dy1·sin + dy2·cos
The kernel reads x through its strides (the [batch, heads, seq, dim] views that attention
layers make by transposing need no copy first) and handles ROWS rows per program. cos/sin are
[seq, dim/2] tables (trainperf's LM) or per-batch [batch, seq, dim] tensors whose halves repeat
(Hugging Face's Llama). `rope_reference` (kernels/rope_reference.py) is the PyTorch version the LM uses too.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainperf.kernels.rope_reference import rope_reference  # noqa: F401 - the reference beside its kernel

ROWS = 16


@triton.jit
def _rope_kernel(X, COS, SIN, Y, N_ROWS, HEADS, SEQ, HALF, sxb, sxh, sxn, scb, scn, SIGN,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < N_ROWS) & (cols[None, :] < HALF)
    pos = rows % SEQ
    head = (rows // SEQ) % HEADS
    batch = rows // (SEQ * HEADS)
    x_ptrs = X + (batch * sxb + head * sxh + pos * sxn)[:, None] + cols[None, :]
    cs = (batch * scb + pos * scn)[:, None] + cols[None, :]
    x1 = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(COS + cs, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(SIN + cs, mask=mask, other=0.0).to(tl.float32) * SIGN
    y_ptrs = Y + rows[:, None] * 2 * HALF + cols[None, :]
    tl.store(y_ptrs, (x1 * c - x2 * s).to(Y.dtype.element_ty), mask=mask)
    tl.store(y_ptrs + HALF, (x1 * s + x2 * c).to(Y.dtype.element_ty), mask=mask)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """x: [b, h, seq, d] with unit stride in d; cos, sin: [b or 1, seq, ≥ d/2] (first half used)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    b, h, seq, d = x.shape
    half = d // 2
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = b * h * seq
    batch_stride = cos.stride(0) if cos.shape[0] > 1 else 0
    _rope_kernel[(triton.cdiv(rows, ROWS),)](
        x, cos, sin, y, rows, h, seq, half, x.stride(0), x.stride(1), x.stride(2), batch_stride,
        cos.stride(1), sign, ROWS=ROWS, BLOCK=triton.next_power_of_2(half))
    return y


# The kernel runs inside a PyTorch custom op, so torch.compile and CUDA graphs take it whole; the
# backward is the same op rotating the other way.
@torch.library.custom_op("trainperf::triton_rope", mutates_args=())
def rope_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """x [b, h, seq, d] rotated by sign·θ (1.0 forward, -1.0 its backward)."""
    return _rotate(x, cos, sin, float(sign))


@rope_op.register_fake
def _(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    return x.new_empty(x.shape)


def _setup(ctx, inputs, output) -> None:  # noqa: ANN001
    _x, cos, sin, ctx.sign = inputs
    ctx.save_for_backward(cos, sin)


def _backward(ctx, dy):  # noqa: ANN001, ANN202
    cos, sin = ctx.saved_tensors
    return rope_op(dy, cos, sin, -ctx.sign), None, None, None


rope_op.register_autograd(_backward, setup_context=_setup)


def rope_triton(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., seq, head_dim] by the per-position angles (cos, sin: [seq, head_dim/2])."""
    seq, d = x.shape[-2:]
    x4 = x.reshape(-1, 1, seq, d)
    y = rope_op(x4, cos[None, :seq].contiguous(), sin[None, :seq].contiguous(), 1.0)
    return y.reshape(x.shape)


def rope_triton_hf(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Hugging Face's apply_rotary_pos_emb for one tensor: x [b, h, seq, d] (any strides with a
    unit last one), cos, sin [b or 1, seq, d] with repeated halves, as Llama's rotary module makes."""
    return rope_op(x, cos, sin, 1.0)
