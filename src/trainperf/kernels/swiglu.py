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


# Each kernel runs inside a PyTorch custom op, so torch.compile and CUDA graphs take it whole.
@torch.library.custom_op("trainperf::triton_swiglu", mutates_args=())
def swiglu_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    h = torch.empty_like(a)
    _swiglu_fwd[(triton.cdiv(a.numel(), BLOCK),)](a, b, h, a.numel(), BLOCK=BLOCK)
    return h


@swiglu_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(a, memory_format=torch.contiguous_format)


@torch.library.custom_op("trainperf::triton_swiglu_backward", mutates_args=())
def swiglu_backward_op(a: torch.Tensor, b: torch.Tensor,
                       dh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = a.contiguous(), b.contiguous()
    da, db = torch.empty_like(a), torch.empty_like(b)
    _swiglu_bwd[(triton.cdiv(a.numel(), BLOCK),)](a, b, dh.contiguous(), da, db, a.numel(), BLOCK=BLOCK)
    return da, db


@swiglu_backward_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.empty_like(a, memory_format=torch.contiguous_format),
            torch.empty_like(b, memory_format=torch.contiguous_format))


def _setup(ctx, inputs, output) -> None:  # noqa: ANN001
    ctx.save_for_backward(*inputs)


def _backward(ctx, dh):  # noqa: ANN001, ANN202
    return swiglu_backward_op(*ctx.saved_tensors, dh)


swiglu_op.register_autograd(_backward, setup_context=_setup)


def swiglu_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return swiglu_op(a, b)
