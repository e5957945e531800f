"""Which tile suits the SwiGLU kernels on a float8 gate and up product, and how near do they come to
the bandwidth?

trainperf's float8 MLP has cuBLAS write the gate and up product `gu` as e4m3
(kernels/float8_mlp.py GATE_UP_IN_FLOAT8), which the SwiGLU kernels then read at half the bytes.
Per element the forward kernel on it issues more instructions than on a bf16 product (its inverse
scale, the saturation-aware amax of `gu`; float8_kernel_instructions.py), so at a tile of few
elements a thread it can spend longer issuing them than moving the bytes.

This times the SwiGLU kernels at the Llama-3.2-1B step's shapes on a bf16 and an e4m3 `gu`, the
forward and the backward, at several tiles and warp counts (medians of `do_bench`), beside the plain
cast of a tensor of h's size (the bandwidth a cast kernel reaches). Each tile's outputs are checked
first against those at its shipped tile: the same float8 bytes and amaxes. On the CPU (Triton's
interpreter) only that check runs, on small tensors.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_swiglu_gate_up.py [tokens ...]
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
import triton

from trainperf.kernels import float8_mlp as mlp

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FFN = 8192 if DEVICE == "cuda" else 256  # Llama-3.2-1B's
# (rows, columns, warps)
TILES = ((*mlp.SWIGLU_TILE, mlp.WARPS), (32, 256, 8), (16, 256, 4), (32, 128, 4), (32, 128, 8), (32, 512, 4),
         (64, 128, 4), (64, 128, 8))
GU_INV = 1 / 16  # the inverse scale of the e4m3 gu the probe makes
Launch = Callable[[], None]


def outputs_for(gu: torch.Tensor, backward: bool) -> tuple[torch.Tensor, ...]:
    """What a launch writes (the float8 output, its transpose, its amax and the forward's amax of gu)
    and reads (the output's scale, gu's inverse scale)."""
    t, f = gu.shape[0], gu.shape[1] // 2
    y = mlp.with_transpose(t, 2 * f if backward else f, mlp.E5M2 if backward else mlp.E4M3, gu.device)
    scale = torch.full((1,), 1024.0 if backward else 4.0, device=gu.device)
    return (*y, torch.zeros(2, device=gu.device), scale, torch.full((8,), GU_INV, device=gu.device))


def launch(gu: torch.Tensor, dh: torch.Tensor | None, out: tuple[torch.Tensor, ...],
           tile: tuple[int, int, int]) -> Launch:
    """A launch of the forward kernel over gu (the backward's with dh) at `tile`, writing into `out`
    (outputs_for)."""
    y, yt, amax, scale, inv = out
    t, f = gu.shape[0], gu.shape[1] // 2
    bm, bn, warps = tile
    fp8 = gu.dtype == mlp.E4M3
    grid = (triton.cdiv(t, bm), triton.cdiv(f, bn))
    fmax = mlp.float8_max(y.dtype)
    if dh is not None:
        return lambda: mlp._swiglu_bwd_kernel[grid](dh, gu, y, yt, scale, amax, t, f, FMAX=fmax, BM=bm, BN=bn,
                                                    GU_INV=inv if fp8 else None, num_warps=warps)
    return lambda: mlp._swiglu_kernel[grid](gu, y, yt, scale, amax, t, f, FMAX=fmax, BM=bm, BN=bn,
                                            GU_INV=inv if fp8 else None, GU_AMAX=amax[1:] if fp8 else None,
                                            num_warps=warps)


def check_tile(gu: torch.Tensor, dh: torch.Tensor | None, tile: tuple[int, int, int]) -> None:
    """That a kernel's outputs at `tile` are those at its shipped tile: its float8 bytes and amaxes."""
    shipped = (*mlp.SWIGLU_TILE, mlp.WARPS) if dh is None else (*mlp.SWIGLU_BWD_TILE, mlp.SWIGLU_BWD_WARPS)
    ref, out = outputs_for(gu, dh is not None), outputs_for(gu, dh is not None)
    launch(gu, dh, ref, shipped)()
    launch(gu, dh, out, tile)()
    for a, b in zip(out[:3], ref[:3], strict=True):
        if not torch.equal(a.view(torch.uint8), b.view(torch.uint8)):
            raise AssertionError(f"{'backward' if dh is not None else 'forward'} at {tile} differs from "
                                 f"{shipped} on {gu.dtype}")


def gate_up(tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An e4m3 gate and up product at inverse scale GU_INV, a few values at e4m3's maximum, and a
    bf16 gradient of h."""
    torch.manual_seed(0)
    gu = (torch.randn(tokens, 2 * FFN, device=DEVICE) * 48).clamp(-448, 448)
    gu[0, :4] = 448
    return gu.to(mlp.E4M3), torch.randn(tokens, FFN, device=DEVICE).bfloat16()


def main() -> None:
    if DEVICE != "cuda":
        for tokens in (192, 200):  # tiles that divide the tensor, and tiles that do not
            gu_fp8, dh = gate_up(tokens)
            for gu in (gu_fp8, (gu_fp8.float() * GU_INV).bfloat16()):
                for tile in TILES:
                    check_tile(gu, None, tile)
                    check_tile(gu, dh, tile)
            print(f"{tokens} tokens: every tile's outputs are those at the shipped tiles (the interpreter)")
        return
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for tokens in map(int, sys.argv[1:] or ["16384", "12288"]):
        gu_fp8, dh = gate_up(tokens)
        gu_bf16 = (gu_fp8.float() * GU_INV).bfloat16()
        cast = functools.partial(mlp.cast_transposed, dh, mlp.ScaleState(dh.device), mlp.X, mlp.E4M3)
        ms = triton.testing.do_bench(cast, warmup=50, rep=300)
        print(f"{tokens} tokens: plain cast of h [{tokens}, {FFN}] bf16: {ms * 1e3:.1f} us "
              f"({3 * dh.numel() / ms / 1e9:.2f} TB/s)", flush=True)
        for name, gu, grad in (("forward, bf16 gu", gu_bf16, None), ("forward, e4m3 gu", gu_fp8, None),
                               ("backward, bf16 gu", gu_bf16, dh), ("backward, e4m3 gu", gu_fp8, dh)):
            for tile in TILES:
                check_tile(gu, grad, tile)
                ms = triton.testing.do_bench(launch(gu, grad, outputs_for(gu, grad is not None), tile),
                                             warmup=50, rep=300)
                moved = gu.numel() * gu.element_size() + gu.numel() * (1 if grad is None else 2)
                moved += 0 if grad is None else grad.numel() * grad.element_size()
                print(f"{tokens} tokens: {name:18s} tile {tile[0]}x{tile[1]} {tile[2]} warps: "
                      f"{ms * 1e3:7.1f} us ({moved / ms / 1e9:.2f} TB/s)", flush=True)


if __name__ == "__main__":
    main()
