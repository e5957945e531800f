"""Which tile shape should the float8 MLP's casts take?

trainperf's float8 MLP (kernels/float8_mlp.py) casts in tiles of TILE, each program writing its
tile as float8 and again transposed. The float8 head's gradient cast went from 2.89 to 2.09 ms for
8,192 rows of logits when its tiles went from 64 x 64 to 64 x 128 (float8_logits_grad.py); these
three kernels (the plain cast serves the attention projections too) take 15 ms of the Llama-3.2-1B
float8 step's 107 ms of kernels at 12 x 1024 (results/float8/h200-2026-11-29b/profiles/). Each is
timed here at a few tile shapes and warp counts on the step's shapes, in alternating rounds (median
of each), and its outputs (float8 and transposed, the amax) are checked equal to those of TILE.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_cast_tiles.py [tokens] [width] [ffn] [rounds]
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton

from trainperf.kernels import float8_mlp as mlp

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU under TRITON_INTERPRET=1
TILES = ((64, 64, 8), (64, 128, 8), (128, 64, 8), (128, 128, 8), (128, 128, 16), (64, 128, 4))


def kernels(t: int, d: int, f: int) -> dict:
    """name -> (kernel, its tensor arguments, the [rows, cols] of its tile grid, its float8 dtype)."""
    bf16 = dict(device=DEVICE, dtype=torch.bfloat16)
    x, gu, dh = torch.randn(t, d, **bf16), 3 * torch.randn(t, 2 * f, **bf16), torch.randn(t, f, **bf16)

    def out(rows: int, cols: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.empty(rows, cols, device=DEVICE, dtype=dtype),
                torch.empty(cols, rows, device=DEVICE, dtype=dtype))

    return {"cast x [t, d]": (mlp._cast_kernel, (x, *out(t, d, mlp.E4M3)), (t, d), mlp.E4M3),
            "swiglu [t, f]": (mlp._swiglu_kernel, (gu, *out(t, f, mlp.E4M3)), (t, f), mlp.E4M3),
            "swiglu backward [t, 2f]": (mlp._swiglu_bwd_kernel, (dh, gu, *out(t, 2 * f, mlp.E5M2)), (t, f),
                                        mlp.E5M2)}


def launch(kernel, args: tuple, shape: tuple[int, int], dtype: torch.dtype, tile: tuple[int, int, int],
           amax: torch.Tensor) -> None:
    bm, bn, warps = tile
    scale = torch.ones(1, device=DEVICE)
    kernel[triton.cdiv(shape[0], bm), triton.cdiv(shape[1], bn)](
        *args, scale, amax, *shape, FMAX=mlp.float8_max(dtype), BM=bm, BN=bn, num_warps=warps)


def check_and_time(name: str, kernel, args: tuple, shape: tuple[int, int], dtype: torch.dtype,
                   rounds: int) -> None:
    want = None
    for tile in TILES:  # the same math in every tile: the outputs must be equal bit for bit
        amax = torch.zeros(1, device=DEVICE)
        launch(kernel, args, shape, dtype, tile, amax)
        got = [o.view(torch.uint8).clone() for o in args[-2:]] + [amax]
        want = want or got
        same = all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        print(f"{name}: tile {tile[0]}x{tile[1]}, {tile[2]} warps: {'equal' if same else 'DIFFERENT'}",
              flush=True)
    if DEVICE == "cpu":  # the interpreter checks the tiles; timing them needs a GPU
        return
    amax = torch.zeros(1, device=DEVICE)
    times: dict[tuple, list[float]] = {tile: [] for tile in TILES}
    for _ in range(rounds):
        for tile in TILES:
            times[tile].append(triton.testing.do_bench(
                lambda tile=tile: launch(kernel, args, shape, dtype, tile, amax), warmup=25, rep=100))
    base = statistics.median(times[TILES[0]])
    for tile, ms in times.items():
        t = statistics.median(ms)
        print(f"  {name:24s} {tile[0]:3d}x{tile[1]:<3d} {tile[2]:2d} warps  {t:7.3f} ms  {base / t:.2f}x",
              flush=True)


def main(tokens: int = 12288, width: int = 2048, ffn: int = 8192, rounds: int = 5) -> None:
    torch.manual_seed(0)
    for name, (kernel, args, shape, dtype) in kernels(tokens, width, ffn).items():
        check_and_time(name, kernel, args, shape, dtype, rounds)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
