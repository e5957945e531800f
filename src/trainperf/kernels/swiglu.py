"""The SwiGLU activation silu(a)·b as one Triton kernel each way.

forward   h = a·σ(a)·b
backward  da = dh·b·σ(a)·(1 + a·(1 − σ(a))),  db = dh·a·σ(a)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

BLOCK = 1024


def swiglu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


@triton.jit
def _swiglu_fwd(A, B, H, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(H + offs, (a * tl.sigmoid(a) * b).to(H.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd(A, B, DH, DA, DB, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    dh = tl.load(DH + offs, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    tl.store(DA + offs, (dh * b * sig * (1 + a * (1 - sig))).to(DA.dtype.element_ty), mask=mask)
    tl.store(DB + offs, (dh * a * sig).to(DB.dtype.element_ty), mask=mask)


class TritonSwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):  # noqa: ANN001, ANN205
        a, b = a.contiguous(), b.contiguous()
        h = torch.empty_like(a)
        _swiglu_fwd[(triton.cdiv(a.numel(), BLOCK),)](a, b, h, a.numel(), BLOCK=BLOCK)
        ctx.save_for_backward(a, b)
        return h

    @staticmethod
    def backward(ctx, dh):  # noqa: ANN001, ANN205
        a, b = ctx.saved_tensors
        da, db = torch.empty_like(a), torch.empty_like(b)
        _swiglu_bwd[(triton.cdiv(a.numel(), BLOCK),)](a, b, dh.contiguous(), da, db, a.numel(), BLOCK=BLOCK)
        return da, db


def swiglu_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return TritonSwiGLU.apply(a, b)
