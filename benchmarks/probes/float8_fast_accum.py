"""Would the float8 MLP's backward products pay for fast accumulation?

trainperf's float8 MLP (kernels/float8_mlp.py) runs its forward products with `use_fast_accum`
and its four backward products without, as torchao does by default: Hopper's float8 tensor cores
accumulate in fewer bits than float32 unless cuBLAS promotes the partial sums. Each backward
product of the Llama-3.2-1B step is run both ways on float8 operands cast from random bf16 ones:
its error against the float64 product of the same float8 operands (the accumulation's error alone),
then its time in alternating rounds (median of each).
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_fast_accum.py [tokens] [width] [ffn] [rounds]
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def operand(rows: int, cols: int, dtype: torch.dtype, std: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A [rows, cols] K-contiguous float8 operand cast at its amax, and its inverse scale."""
    x = std * torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    scale = torch.finfo(dtype).max / x.abs().amax().float()
    return (x.float() * scale).to(dtype), (1 / scale).reshape(())


def products(t: int, d: int, f: int) -> dict[str, tuple[tuple, tuple]]:
    """name -> ((a [M, K], its inverse scale), (b_t [N, K], its inverse scale)) of each backward product."""
    return {"dh = dy · w_d": (operand(t, d, E5M2, 1e-3), operand(f, d, E4M3, 0.02)),
            "grad w_d = dyᵀ · h": (operand(d, t, E5M2, 1e-3), operand(f, t, E4M3, 0.5)),
            "dx = dgu · w_gu": (operand(t, 2 * f, E5M2, 1e-3), operand(d, 2 * f, E4M3, 0.02)),
            "grad w_gu = dguᵀ · x": (operand(2 * f, t, E5M2, 1e-3), operand(d, t, E4M3, 1.0))}


def product(a: tuple, b: tuple, fast: bool) -> torch.Tensor:
    return torch._scaled_mm(a[0], b[0].t(), scale_a=a[1], scale_b=b[1], out_dtype=torch.bfloat16,
                            use_fast_accum=fast)


def main(tokens: int = 12288, width: int = 2048, ffn: int = 8192, rounds: int = 5) -> None:
    torch.manual_seed(0)
    for name, (a, b) in products(tokens, width, ffn).items():
        want = (a[0].double() * a[1].double()) @ (b[0].double() * b[1].double()).t()
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for fast in times:
                times[fast].append(triton.testing.do_bench(lambda a=a, b=b, fast=fast: product(a, b, fast),
                                                           warmup=25, rep=100))
        for fast, ms in times.items():
            err = (product(a, b, fast).double() - want).norm() / want.norm()
            print(f"{name:22s} {tuple(a[0].shape)}·{tuple(b[0].shape)}ᵀ fast accumulation "
                  f"{'on ' if fast else 'off'}: {statistics.median(ms):7.3f} ms, relative error "
                  f"{err:.2e}", flush=True)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
