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
  rows, a row at a time, dw from per-program partials that a second Triton kernel sums;
- `torch.sum`: the same kernel, its partials summed by `torch.sum` and cast by `.to` (two kernels).
(A candidate that took 2, 4 or 8 rows at a time in a program was slower than one row at a time:
benchmarks/results/explorations/h200-2026-12-04/probes/.)
Each is first checked against the float64 gradients, then timed replayed as a CUDA graph, as the step
runs it (timed eagerly, a call's launches from Python can take longer than its kernels; `inductor`,
whose compiled backward does not capture, is timed eagerly). On the CPU (Triton's
interpreter) only the checks run, on small tensors, in float16.
Usage: PYTHONPATH=src python3 benchmarks/probes/rmsnorm_backward.py [tokens ...]
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.testing

from trainperf.kernels.float8_norm import rms_norm_reference
from trainperf.kernels.rmsnorm import rmsnorm_backward_op, rmsnorm_backward_partials

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
WIDTH = 2048 if DEVICE == "cuda" else 256  # Llama-3.2-1B's
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter rounds bf16 wrong
EPS = 1e-5


def summed_by_torch(dx: torch.Tensor, partial: torch.Tensor, dtype: torch.dtype
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    return dx, partial.sum(0).to(dtype)


def add_norm(x: torch.Tensor, attn: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """s = x + attn and transformers' LlamaRMSNorm of s."""
    s = x + attn
    return rms_norm_reference(s, w, EPS), s


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
            "trainperf": lambda: rmsnorm_backward_op(dh, s, w, rstd, ds),
            "torch.sum": lambda: summed_by_torch(*rmsnorm_backward_partials(dh, s, w, rstd, ds), w.dtype)}
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
