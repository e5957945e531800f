"""Would triton-fa2's two backward kernels gain from running at once, on two CUDA streams?

The dK/dV and dQ kernels read the same inputs and write different outputs, so they may overlap:
the second one fills the SMs the first one's last wave leaves idle, and programs of two kernels
on one SM need not meet at the same phase (exponentials against matrix products). Times the two
kernels one after the other and side by side (each order), after one autotuned backward.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa2_concurrent_bwd.py B H N D
"""

from __future__ import annotations

import sys

import torch
import triton
from triton.testing import do_bench

from trainperf.attention import flash_triton as ft


def main(b: int, h: int, n: int, d: int) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    out = ft.flash_attention_triton(q, k, v, causal=True)
    dout = torch.randn_like(out)
    lse = out.grad_fn.saved_tensors[4]
    out.backward(dout)  # autotunes both kernels
    args, scale = ft._launch_args(q), d ** -0.5
    delta = (out.detach().float() * dout.float()).sum(-1).reshape(b * h, n)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    scales = (scale * ft.LOG2E, scale, n)

    def dkdv() -> None:
        ft._bwd_dkdv_kernel[lambda m: (triton.cdiv(n, m["BLOCK_N"]), b * h)](
            q, k, v, dout, lse, delta, dk, dv, dq, *scales, CAUSAL=True, ATOMIC_DQ=False,
            TMA=ft._use_tma(q), **args)

    def dq_() -> None:
        ft._bwd_dq_kernel[lambda m: (triton.cdiv(n, m["BLOCK_M"]), b * h)](
            q, k, v, out, dout, lse, delta, dq, *scales, CAUSAL=True, TMA=ft._use_tma(q), **args)

    side = torch.cuda.Stream()

    def together(first, second) -> None:  # noqa: ANN001 - first goes to the side stream
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            first()
        second()
        main.wait_stream(side)

    cases = {"dkdv alone": dkdv, "dq alone": dq_, "dkdv then dq": lambda: (dkdv(), dq_()),
             "dq (side) with dkdv": lambda: together(dq_, dkdv),
             "dkdv (side) with dq": lambda: together(dkdv, dq_)}
    for name, fn in cases.items():
        print(f"B{b} H{h} N{n} d{d} {name}: {do_bench(fn, warmup=25, rep=200):.4f} ms", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:5]))
