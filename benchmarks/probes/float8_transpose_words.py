"""Do the float8 casts write their transposed tile faster four values to a 32-bit word?

Each float8 cast kernel (kernels/float8_mlp.py) stores its tile, then reads it back in the
transposed order for the transposed store (`transpose_back`). Written a float8 value at a time
(`transpose_bytes` here), Triton moves that tile through shared memory a byte at a time, compiled
for sm_90: in the SwiGLU backward at 32 x 128, about 10 of its 44 PTX instructions an element,
against 34 without the transposed stores (float8_kernel_instructions.py counts them). The shipped
`transpose_back` reads the tile back as 32-bit words of four columns from four rows, and writes
each column's four rows as one word, its bytes gathered with shifts and masks; it compiles with no
shared memory. This times the SwiGLU backward and the plain cast with either transposed store at
the step's shapes (medians of `do_bench`), after checking that both write the same bytes. On the
CPU (Triton's interpreter) only that check runs.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_transpose_words.py [tokens]
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from trainperf.kernels import float8_mlp as mlp
from trainperf.kernels.float8_mlp import atomic_amax, store_float8, tile_of

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
WIDTH, FFN = (2048, 8192) if DEVICE == "cuda" else (64, 256)  # Llama-3.2-1B's


@triton.jit
def transpose_bytes(Y, YT, M, N, ROW, LDT, BM: tl.constexpr, BN: tl.constexpr):
    """mlp.transpose_back a float8 value at a time."""
    tl.debug_barrier()
    r, c, mask = tile_of(M, N, BM, BN, True)
    tl.store(YT + c * LDT + r, tl.load(Y + r * ROW + c, mask=mask), mask=mask)


@triton.jit
def _cast_bytes(X, Y, YT, SCALE, AMAX, M, N, FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """mlp._cast_kernel with transpose_bytes."""
    r, c, mask = tile_of(M, N, BM, BN, False)
    x = tl.load(X + r * N + c, mask=mask, other=0.0).to(tl.float32)
    atomic_amax(AMAX, x, mask)
    store_float8(x, Y, r * N + c, mask, tl.load(SCALE), FMAX)
    transpose_bytes(Y, YT, M, N, N, M, BM, BN)


@triton.jit
def _swiglu_bwd_bytes(DH, GU, Y, YT, SCALE, AMAX, T, F, FMAX: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr, GU_INV=None):
    """mlp._swiglu_bwd_kernel with transpose_bytes."""
    scale = tl.load(SCALE)
    r, c, mask = tile_of(T, F, BM, BN, False)
    dg, du = mlp._swiglu_grads(DH, GU, r, c, mask, F, GU_INV)
    atomic_amax(AMAX, tl.maximum(tl.abs(dg), tl.abs(du)), mask)
    store_float8(dg, Y, r * (2 * F) + c, mask, scale, FMAX)
    store_float8(du, Y, r * (2 * F) + c + F, mask, scale, FMAX)
    transpose_bytes(Y, YT, T, F, 2 * F, T, BM, BN)
    transpose_bytes(Y + F, YT + F * T, T, F, 2 * F, T, BM, BN)


def cases(tokens: int) -> dict:
    """name -> (the shipped kernel, its byte-by-byte form, its inputs, [rows, cols] of its grid, its output's
    [rows, cols] and dtype, its tile and warps, its other arguments)."""
    torch.manual_seed(0)
    bf16 = dict(device=DEVICE, dtype=torch.bfloat16)
    x, dh = torch.randn(tokens, WIDTH, **bf16), torch.randn(tokens, FFN, **bf16)
    gu = (torch.randn(tokens, 2 * FFN, device=DEVICE) * 48).clamp(-448, 448).to(mlp.E4M3)
    inv = torch.full((1,), 1 / 16, device=DEVICE)
    return {"cast x [t, d]": (mlp._cast_kernel, _cast_bytes, (x,), (tokens, WIDTH), (tokens, WIDTH), mlp.E4M3,
                              (*mlp.TILE, mlp.WARPS), {}),
            "swiglu backward, e4m3 gu": (mlp._swiglu_bwd_kernel, _swiglu_bwd_bytes, (dh, gu), (tokens, FFN),
                                         (tokens, 2 * FFN), mlp.E5M2,
                                         (*mlp.SWIGLU_BWD_TILE, mlp.SWIGLU_BWD_WARPS), {"GU_INV": inv})}


def launcher(kernel, inputs: tuple, grid_shape: tuple[int, int], out: tuple[torch.Tensor, ...],
             tile: tuple[int, int, int], extra: dict):
    bm, bn, warps = tile
    y, yt, scale, amax = out
    grid = (triton.cdiv(grid_shape[0], bm), triton.cdiv(grid_shape[1], bn))
    return lambda: kernel[grid](*inputs, y, yt, scale, amax, *grid_shape, FMAX=mlp.float8_max(y.dtype), BM=bm,
                                BN=bn, num_warps=warps, **extra)


def main(tokens: int) -> None:
    if DEVICE == "cuda":
        print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for name, (shipped, byte_form, inputs, grid_shape, shape, dtype, tile, extra) in cases(tokens).items():
        runs, outs = {}, []
        for form, kernel in (("byte by byte", byte_form), ("words", shipped)):
            y, yt = mlp.with_transpose(*shape, dtype, torch.device(DEVICE))
            yt.view(torch.uint8).fill_(0xFF)  # every byte of the transpose must be written
            out = (y, yt, torch.full((1,), 4.0, device=DEVICE), torch.zeros(1, device=DEVICE))
            runs[form] = launcher(kernel, inputs, grid_shape, out, tile, extra)
            runs[form]()
            outs.append([t.view(torch.uint8) for t in (y, yt)])
        if not all(torch.equal(p, q) for p, q in zip(*outs, strict=True)):
            raise AssertionError(f"{name}: the shipped words form writes other bytes")
        print(f"{tokens} tokens, {name}: both forms write the same bytes", flush=True)
        if DEVICE != "cuda":
            continue
        for form in ("byte by byte", "words"):
            ms = triton.testing.do_bench(runs[form], warmup=50, rep=300)
            print(f"  {name:26s} tile {tile[0]}x{tile[1]} {form:12s} {ms * 1e3:7.1f} us", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else (16384 if DEVICE == "cuda" else 96))
