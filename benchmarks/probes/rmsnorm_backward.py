"""Is trainperf's RMSNorm backward, with the residual's gradient added in it, faster than Inductor's?

In the float8 step each decoder layer's norm before the MLP follows the residual add s = x + attn,
and s also goes on as the residual stream, so s's gradient is the residual's plus the norm's.
Compiled, Inductor computes both and their sum in its kernels (130 and 98 us a layer in a profile
at 1 x 16384, where reading the norm's input and both gradients and writing one moves 256 MB,
about 80 us at 3.2 TB/s). trainperf's float8 layers take `rmsnorm_backward_op` (kernels/rmsnorm.py)
with the residual's gradient as `skip` instead. This times, at Llama-3.2-1B's width:
- `inductor`: the compiled s = x + attn, h = rmsnorm(s)·w, both returned, and the gradients of x,
  attn and w from those of h and s (`torch.autograd.grad` of the compiled graph, so that nothing
  accumulates), as the step's compiled layer computes them;
- `trainperf`: `rmsnorm_backward_op(dh, s, w, rstd, skip=ds)`: one program per 4 SMs' worth of
  rows, a row at a time, dw from per-program partials;
- `rows R`: the same arithmetic R rows at a time in a program (a candidate, `_rows_kernel`).
Each is first checked against the float64 gradients, then timed replayed as a CUDA graph, as the step
runs it (timed eagerly, two Triton launches a call cost more on the CPU than the kernels on the GPU;
`inductor`, whose compiled backward does not capture, is timed eagerly). On the CPU (Triton's
interpreter) only the checks run, on small tensors, in float16.
Usage: PYTHONPATH=src python3 benchmarks/probes/rmsnorm_backward.py [tokens ...]
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from trainperf.kernels.float8_norm import rms_norm_reference
from trainperf.kernels.rmsnorm import rmsnorm_backward_op

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
WIDTH = 2048 if DEVICE == "cuda" else 256  # Llama-3.2-1B's
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter rounds bf16 wrong
EPS = 1e-5
ROWS = (2, 4, 8)  # rows a program of the candidate takes at a time


def add_norm(x: torch.Tensor, attn: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """s = x + attn and transformers' LlamaRMSNorm of s."""
    s = x + attn
    return rms_norm_reference(s, w, EPS), s


@triton.jit
def _rows_kernel(X, W, DY, RSTD, SKIP, DX, DW_PARTIAL, M, N, STEPS, R: tl.constexpr, BLOCK: tl.constexpr):
    """rmsnorm_backward_op's arithmetic, R rows at a time: program p takes rows [p·STEPS·R, ...)."""
    cols = tl.arange(0, BLOCK)[None, :]
    w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
    dw = tl.zeros([R, BLOCK], tl.float32)
    for i in range(0, STEPS):
        row = ((tl.program_id(0) * STEPS + i) * R + tl.arange(0, R)).to(tl.int64)[:, None]
        mask = (row < M) & (cols < N)
        at = row * N + cols
        x = tl.load(X + at, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + at, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + row, mask=row < M, other=0.0)
        x_hat = x * rstd
        wdy = w * dy
        c = tl.sum(x_hat * wdy, 1)[:, None] / N
        dx = rstd * (wdy - x_hat * c) + tl.load(SKIP + at, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + at, dx.to(DX.dtype.element_ty), mask=mask)
        dw += dy * x_hat
    tl.store(DW_PARTIAL + tl.program_id(0) * N + cols, tl.sum(dw, 0)[None, :], mask=cols < N)


def rows_backward(dh: torch.Tensor, s: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor, ds: torch.Tensor,
                  r: int) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = s.shape
    sms = torch.cuda.get_device_properties(s.device).multi_processor_count if s.is_cuda else 4
    programs = min(triton.cdiv(m, r), 4 * sms)
    steps = triton.cdiv(triton.cdiv(m, r), programs)
    dx = torch.empty_like(s)
    partial = torch.empty(programs, n, dtype=torch.float32, device=s.device)
    _rows_kernel[(programs,)](s, w, dh, rstd, ds, dx, partial, m, n, steps, R=r,
                              BLOCK=triton.next_power_of_2(n))
    return dx, partial.sum(0).to(w.dtype)


def main(tokens: int) -> None:
    torch.manual_seed(0)
    x, attn, dh, ds = (torch.randn(tokens, WIDTH, device=DEVICE).to(DTYPE) for _ in range(4))
    w = (1 + 0.1 * torch.randn(WIDTH, device=DEVICE)).to(DTYPE)
    x64, a64, w64 = (t.double().requires_grad_() for t in (x, attn, w))
    want = torch.autograd.grad(add_norm(x64, a64, w64), (x64, w64), (dh.double(), ds.double()))
    s = x + attn
    rstd = torch.rsqrt(s.float().pow(2).mean(-1) + EPS)
    leaves = [t.clone().requires_grad_() for t in (x, attn, w)]
    compiled = torch.compile(add_norm) if DEVICE == "cuda" else add_norm
    outs = compiled(*leaves)
    runs = {"inductor": lambda: torch.autograd.grad(outs, leaves, (dh, ds), retain_graph=True)[0::2],
            "trainperf": lambda: rmsnorm_backward_op(dh, s, w, rstd, ds)}
    for r in ROWS:
        runs[f"rows {r}"] = lambda r=r: rows_backward(dh, s, w, rstd, ds, r)
    for name, run in runs.items():
        dx, dw = run()
        errors = [((g.double() - t).norm() / t.norm()).item() for g, t in zip((dx, dw), want, strict=True)]
        if max(errors) > 2e-2:
            raise AssertionError(f"{name}: dx and dw off float64 by {errors[0]:.2e}, {errors[1]:.2e}")
        print(f"  {name:10s} dx, dw against float64: {errors[0]:.2e}, {errors[1]:.2e}", flush=True)
    if DEVICE != "cuda":
        return
    moved = tokens * WIDTH * 2 * 4  # s, dh and ds read, ds' written, in bf16
    for name, run in runs.items():
        bench = triton.testing.do_bench if name == "inductor" else triton.testing.do_bench_cudagraph
        us = bench(run, rep=300) * 1e3
        print(f"  {name:10s} {us:7.1f} us ({moved / us / 1e6:.2f} TB/s of the four tensors' bytes)",
              flush=True)


if __name__ == "__main__":
    # the compiled backward runs again and again on one graph, which donated buffers refuse
    torch._functorch.config.donated_buffer = False
    if DEVICE == "cuda":
        print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for t in sys.argv[1:] or ([16384, 12288] if DEVICE == "cuda" else [96, 100]):
        print(f"{t} tokens x {WIDTH}", flush=True)
        main(int(t))
