"""Rotary position embedding (rotate-half form) as one Triton kernel each way.

For each row (batch, head, position) with halves x1, x2 and the position's cos/sin:
  forward   y1 = x1·cos − x2·sin,   y2 = x1·sin + x2·cos
  backward  the rotation by −θ:  dx1 = dy1·cos + dy2·sin,  dx2 = −dy1·sin + dy2·cos
`rope_reference` is the PyTorch version used by the LM.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [..., seq, head_dim]; cos, sin: [seq, head_dim / 2]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


@triton.jit
def _rope_kernel(X, COS, SIN, Y, SEQ, HALF, SIGN, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    pos = row % SEQ
    cols = tl.arange(0, BLOCK)
    mask = cols < HALF
    base = row * 2 * HALF
    x1 = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(X + base + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(COS + pos * HALF + cols, mask=mask, other=0.0)
    s = tl.load(SIN + pos * HALF + cols, mask=mask, other=0.0) * SIGN
    tl.store(Y + base + cols, (x1 * c - x2 * s).to(Y.dtype.element_ty), mask=mask)
    tl.store(Y + base + HALF + cols, (x1 * s + x2 * c).to(Y.dtype.element_ty), mask=mask)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    x = x.contiguous()
    seq, half = x.shape[-2], x.shape[-1] // 2
    y = torch.empty_like(x)
    _rope_kernel[(x.numel() // (2 * half),)](x, cos.float().contiguous(), sin.float().contiguous(), y, seq,
                                             half, sign, BLOCK=triton.next_power_of_2(half))
    return y


class TritonRope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):  # noqa: ANN001, ANN205
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, 1.0)

    @staticmethod
    def backward(ctx, dy):  # noqa: ANN001, ANN205
        cos, sin = ctx.saved_tensors
        return _rotate(dy, cos, sin, -1.0), None, None


def rope_triton(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., seq, head_dim] by the per-position angles (cos, sin: [seq, head_dim/2])."""
    seq = x.shape[-2]
    return TritonRope.apply(x, cos[:seq], sin[:seq])
