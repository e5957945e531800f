"""Which tile shape should the float8 MLP's casts take?

trainperf's float8 MLP (kernels/float8_mlp.py) casts in tiles of TILE, each program writing its
tile as float8 and again transposed. The float8 head's gradient cast went from 2.89 to 2.09 ms for
8,192 rows of logits when its tiles went from 64 x 64 to 64 x 128 (float8_logits_grad.py); these
three kernels (the plain cast serves the attention projections too) take 15 ms of the Llama-3.2-1B
float8 step's 107 ms of kernels at 12 x 1024 (results/float8/h200-2026-11-29b/profiles/). Each
computes its tile once, stores it as float8 and reads that float8 tile back transposed for the
transposed store (`readback`); their earlier form (`twice`, here) computed the tile again in the
transposed order from its bf16 inputs, four to six times the bytes. Both forms are timed at a few
tile shapes and warp counts on the step's shapes, in alternating rounds (median of each), and their
outputs (float8 and transposed, the amax) are checked equal to those of the kernels at TILE.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_cast_tiles.py [tokens] [width] [ffn] [rounds]
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl

from trainperf.kernels import float8_mlp as mlp
from trainperf.kernels.float8_mlp import atomic_amax, store_float8, tile_of

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU under TRITON_INTERPRET=1
TILES = ((64, 128, 4), (32, 256, 4), (32, 128, 4), (16, 256, 4), (64, 128, 8), (128, 128, 8))  # TILE first


# The kernels' earlier form, kept to be timed against theirs: each tile computed twice, as [rows,
# cols] and as [cols, rows] from loads in that order, its second pass reading the bf16 inputs again.
@triton.jit
def _cast_twice(X, Y, YT, SCALE, AMAX, M, N, FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    scale = tl.load(SCALE)
    r, c, mask = tile_of(M, N, BM, BN, False)
    x = tl.load(X + r * N + c, mask=mask, other=0.0).to(tl.float32)
    atomic_amax(AMAX, x, mask)
    store_float8(x, Y, r * N + c, mask, scale, FMAX)
    r, c, mask = tile_of(M, N, BM, BN, True)
    x = tl.load(X + r * N + c, mask=mask, other=0.0).to(tl.float32)
    store_float8(x, YT, c * M + r, mask, scale, FMAX)


@triton.jit
def _swiglu_twice(GU, Y, YT, SCALE, AMAX, T, F, FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    scale = tl.load(SCALE)
    r, c, mask = tile_of(T, F, BM, BN, False)
    g, u = mlp._gate_up(GU, r, c, mask, F)
    h = g * tl.sigmoid(g) * u
    atomic_amax(AMAX, h, mask)
    store_float8(h, Y, r * F + c, mask, scale, FMAX)
    r, c, mask = tile_of(T, F, BM, BN, True)
    g, u = mlp._gate_up(GU, r, c, mask, F)
    store_float8(g * tl.sigmoid(g) * u, YT, c * T + r, mask, scale, FMAX)


@triton.jit
def _swiglu_bwd_twice(DH, GU, Y, YT, SCALE, AMAX, T, F, FMAX: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr):
    scale = tl.load(SCALE)
    r, c, mask = tile_of(T, F, BM, BN, False)
    dg, du = mlp._swiglu_grads(DH, GU, r, c, mask, F)
    atomic_amax(AMAX, tl.maximum(tl.abs(dg), tl.abs(du)), mask)
    store_float8(dg, Y, r * (2 * F) + c, mask, scale, FMAX)
    store_float8(du, Y, r * (2 * F) + c + F, mask, scale, FMAX)
    r, c, mask = tile_of(T, F, BM, BN, True)
    dg, du = mlp._swiglu_grads(DH, GU, r, c, mask, F)
    store_float8(dg, YT, c * T + r, mask, scale, FMAX)
    store_float8(du, YT, (c + F) * T + r, mask, scale, FMAX)


def kernels(t: int, d: int, f: int) -> dict:
    """name -> ({form: kernel}, its tensor arguments, the [rows, cols] of its tile grid, its float8
    dtype)."""
    bf16 = dict(device=DEVICE, dtype=torch.bfloat16)
    x, gu, dh = torch.randn(t, d, **bf16), 3 * torch.randn(t, 2 * f, **bf16), torch.randn(t, f, **bf16)

    def out(rows: int, cols: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.empty(rows, cols, device=DEVICE, dtype=dtype),
                torch.empty(cols, rows, device=DEVICE, dtype=dtype))

    return {"cast x [t, d]": ({"readback": mlp._cast_kernel, "twice": _cast_twice},
                              (x, *out(t, d, mlp.E4M3)), (t, d), mlp.E4M3),
            "swiglu [t, f]": ({"readback": mlp._swiglu_kernel, "twice": _swiglu_twice},
                              (gu, *out(t, f, mlp.E4M3)), (t, f), mlp.E4M3),
            "swiglu backward [t, 2f]": ({"readback": mlp._swiglu_bwd_kernel,
                                         "twice": _swiglu_bwd_twice},
                                        (dh, gu, *out(t, 2 * f, mlp.E5M2)), (t, f), mlp.E5M2)}


def launch(kernel, args: tuple, shape: tuple[int, int], dtype: torch.dtype, tile: tuple[int, int, int],
           amax: torch.Tensor) -> None:
    bm, bn, warps = tile
    scale = torch.ones(1, device=DEVICE)
    kernel[triton.cdiv(shape[0], bm), triton.cdiv(shape[1], bn)](
        *args, scale, amax, *shape, FMAX=mlp.float8_max(dtype), BM=bm, BN=bn, num_warps=warps)


def check_and_time(name: str, forms: dict, args: tuple, shape: tuple[int, int], dtype: torch.dtype,
                   rounds: int) -> None:
    cases = [(form, tile) for form in forms for tile in TILES]
    want = None
    for form, tile in cases:  # the same math in every case: the outputs must be equal bit for bit
        amax = torch.zeros(1, device=DEVICE)
        for out in args[-2:]:
            out.view(torch.uint8).fill_(0xFF)  # no case may pass on what an earlier one left there
        launch(forms[form], args, shape, dtype, tile, amax)
        got = [o.view(torch.uint8).clone() for o in args[-2:]] + [amax]
        want = want or got
        same = all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        verdict = "equal" if same else "DIFFERENT"
        print(f"{name}: {form}, tile {tile[0]}x{tile[1]}, {tile[2]} warps: {verdict}", flush=True)
    if DEVICE == "cpu":  # the interpreter checks the cases; timing them needs a GPU
        return
    amax = torch.zeros(1, device=DEVICE)
    times: dict[tuple, list[float]] = {case: [] for case in cases}
    for _ in range(rounds):
        for form, tile in cases:
            run = lambda k=forms[form], tile=tile: launch(k, args, shape, dtype, tile, amax)  # noqa: E731
            times[form, tile].append(triton.testing.do_bench(run, warmup=25, rep=100))
    base = statistics.median(times[cases[0]])
    for (form, tile), ms in times.items():
        t = statistics.median(ms)
        print(f"  {name:24s} {form:8s} {tile[0]:3d}x{tile[1]:<3d} {tile[2]:2d} warps  {t:7.3f} ms  "
              f"{base / t:.2f}x", flush=True)


def main(tokens: int = 12288, width: int = 2048, ffn: int = 8192, rounds: int = 5) -> None:
    torch.manual_seed(0)
    for name, (forms, args, shape, dtype) in kernels(tokens, width, ffn).items():
        check_and_time(name, forms, args, shape, dtype, rounds)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
