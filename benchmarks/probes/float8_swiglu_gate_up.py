"""Why is the SwiGLU kernel slower on a float8 gate and up product than on a bf16 one?

trainperf's float8 MLP has cuBLAS write the gate and up product `gu` as e4m3
(kernels/float8_mlp.py GATE_UP_IN_FLOAT8), which the SwiGLU kernel then reads at half the bytes.
In one profiled iteration of `fp8-trainperf-all` at 1 x 16384 the kernel took 385 us a layer on it,
against 230 us on the bf16 product of an earlier profile. This times the kernel at the step's
shapes on a bf16 `gu` and on an e4m3 `gu` without the saturation-aware amax of `gu` at TILE, and
on an e4m3 `gu` with it at a few tiles and warp counts (medians of `do_bench`), beside the plain
cast of a tensor of h's size (the bandwidth it could reach), and checks that every tile writes
what TILE writes.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_swiglu_gate_up.py [tokens ...]
"""

from __future__ import annotations

import functools
import sys

import torch
import triton

from trainperf.kernels import float8_mlp as mlp

FFN = 8192  # Llama-3.2-1B's
# (rows, columns, warps), TILE first: on the e4m3 product a program's loads are half the bytes
TILES = ((64, 128, 4), (64, 128, 8), (128, 128, 4), (128, 128, 8), (64, 256, 4), (64, 256, 8),
         (128, 256, 8), (32, 256, 4))


def swiglu(gu: torch.Tensor, tile: tuple[int, int, int], gu_amax: bool
           ) -> tuple[tuple[torch.Tensor, ...], callable]:
    """The kernel's outputs over `gu` and a launch that writes them."""
    t, f = gu.shape[0], gu.shape[1] // 2
    h8, h8t = mlp.with_transpose(t, f, mlp.E4M3, gu.device)
    scale, now = torch.full((1,), 4.0, device=gu.device), torch.zeros(2, device=gu.device)
    inv = torch.full((8,), 1 / 16, device=gu.device)
    fp8 = gu.dtype == mlp.E4M3
    bm, bn, warps = tile

    def launch() -> None:
        mlp._swiglu_kernel[triton.cdiv(t, bm), triton.cdiv(f, bn)](
            gu, h8, h8t, scale, now, t, f, FMAX=mlp.float8_max(mlp.E4M3), BM=bm, BN=bn,
            GU_INV=inv if fp8 else None, GU_AMAX=now[1:] if fp8 and gu_amax else None, num_warps=warps)

    return (h8, h8t, now), launch


def bits(t: torch.Tensor) -> torch.Tensor:
    """t as bytes where it is float8 (torch.equal takes no float8)."""
    return t.view(torch.uint8) if t.dtype == mlp.E4M3 else t


def main() -> None:
    for tokens in map(int, sys.argv[1:] or ["16384", "12288"]):
        torch.manual_seed(0)
        gu_bf16 = (3 * torch.randn(tokens, 2 * FFN, device="cuda")).bfloat16()
        gu_fp8 = (gu_bf16.float() * 16).clamp(-448, 448).to(mlp.E4M3)
        h = torch.randn(tokens, FFN, device="cuda").bfloat16()
        state = mlp.ScaleState(h.device)
        ms = triton.testing.do_bench(functools.partial(mlp.cast_transposed, h, state, mlp.X, mlp.E4M3),
                                     warmup=50, rep=300)
        print(f"{tokens} tokens: plain cast of h [{tokens}, {FFN}] bf16: {ms * 1e3:.1f} us "
              f"({3 * h.numel() / ms / 1e9:.2f} TB/s)", flush=True)
        for name, gu, gu_amax, tiles in (("bf16 gu", gu_bf16, False, TILES[:1]),
                                         ("e4m3 gu, no amax", gu_fp8, False, TILES[:1]),
                                         ("e4m3 gu, its amax", gu_fp8, True, TILES)):
            reference = None
            for tile in tiles:
                outputs, launch = swiglu(gu, tile, gu_amax)
                launch()
                if reference is None:
                    reference = [o.clone() for o in outputs]
                same = all(torch.equal(bits(o), bits(r)) for o, r in zip(outputs, reference, strict=True))
                ms = triton.testing.do_bench(launch, warmup=50, rep=300)
                moved = gu.numel() * gu.element_size() + 2 * gu.numel() // 2
                print(f"{tokens} tokens: {name:18s} tile {tile[0]}x{tile[1]} {tile[2]} warps: "
                      f"{ms * 1e3:7.1f} us ({moved / ms / 1e9:.2f} TB/s){'' if same else ' DIFFERS'}",
                      flush=True)


if __name__ == "__main__":
    main()
