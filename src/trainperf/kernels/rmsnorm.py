"""RMSNorm as one Triton kernel forward and one backward, saving only 1/rms per row.

y = x · rstd · w,  rstd = 1 / sqrt(mean(x²) + eps).
Backward (x̂ = x · rstd):  dx = rstd · (w·dy − x̂ · mean(x̂ · w·dy)),  dw = Σ_rows dy · x̂.
The backward kernel runs a fixed number of programs, each striding over rows and keeping its
own partial dw in float32; one `sum` over those partials gives dw (no atomics, deterministic).
`rmsnorm_reference` is the float64-checkable PyTorch version.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float() if x.dtype != torch.float64 else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.to(y.dtype)).to(x.dtype)


@triton.jit
def _rmsnorm_fwd(X, W, Y, RSTD, N_COLS, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    x = tl.load(X + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / N_COLS + eps)
    tl.store(Y + row * N_COLS + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + row, rstd)


@triton.jit
def _rmsnorm_bwd(X, W, DY, RSTD, DX, DW_PARTIAL, N_ROWS, N_COLS, ROWS_PER_PROG, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, ROWS_PER_PROG):
        row = (pid * ROWS_PER_PROG + i).to(tl.int64)
        if row < N_ROWS:
            x = tl.load(X + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + row)
            x_hat = x * rstd
            wdy = w * dy
            c = tl.sum(x_hat * wdy, 0) / N_COLS
            tl.store(DX + row * N_COLS + cols, (rstd * (wdy - x_hat * c)).to(DX.dtype.element_ty), mask=mask)
            dw += dy * x_hat
    tl.store(DW_PARTIAL + pid * N_COLS + cols, dw, mask=mask)


class TritonRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):  # noqa: ANN001, ANN205
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        rows, cols = x2.shape
        y = torch.empty_like(x2)
        rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        block = triton.next_power_of_2(cols)
        _rmsnorm_fwd[(rows,)](x2, weight, y, rstd, cols, eps, BLOCK=block)
        ctx.save_for_backward(x2, weight, rstd)
        ctx.shape, ctx.block = shape, block
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):  # noqa: ANN001, ANN205
        x2, weight, rstd = ctx.saved_tensors
        rows, cols = x2.shape
        programs = min(rows, 4 * _sm_count(x2.device))
        per_prog = triton.cdiv(rows, programs)
        dx = torch.empty_like(x2)
        partial = torch.empty(programs, cols, dtype=torch.float32, device=x2.device)
        _rmsnorm_bwd[(programs,)](x2, weight, dy.reshape(-1, cols).contiguous(), rstd, dx, partial, rows,
                                  cols, per_prog, BLOCK=ctx.block)
        return dx.view(ctx.shape), partial.sum(0).to(weight.dtype), None


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def rmsnorm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension (any leading shape), fused forward and backward."""
    return TritonRMSNorm.apply(x, weight, eps)
