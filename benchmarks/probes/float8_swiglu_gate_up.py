"""Why is the SwiGLU kernel slower on a float8 gate and up product than on a bf16 one, and does a
leaner kernel fix it?

trainperf's float8 MLP has cuBLAS write the gate and up product `gu` as e4m3
(kernels/float8_mlp.py GATE_UP_IN_FLOAT8), which the SwiGLU kernels then read at half the bytes.
In one profiled iteration of `fp8-trainperf-all` at 1 x 16384 the forward kernel took 385 us a
layer on it, against 230 us on the bf16 product of an earlier profile. Compiled for sm_90, its PTX
holds about 40 instructions a (g, u) pair on the e4m3 product against 23 on the bf16 one (the
dequantizing multiplies and the saturation-aware amax of `gu`, element by element;
float8_kernel_instructions.py), at which rate issuing them takes about as long as moving the
bytes. The `lean` candidate has fewer: it takes the amax of `gu` from one tile maximum of the raw
e4m3 values (scaled, and doubled where it reached e4m3's maximum), and leaves u unscaled (its
inverse scale folds into h's amax and output scale).
The backward kernel runs 38.5 instructions an element on the bf16 product and 41.8 on the e4m3
one; it is timed here as shipped.

This times the shipped kernels at the step's shapes on a bf16 and an e4m3 `gu` (the forward also
without the amax of `gu`, the backward at a few tiles and warp counts), beside `lean` at those tiles
(medians of `do_bench`) and the plain cast of a tensor of h's size (the bandwidth they could reach).
`lean`'s outputs are checked against the shipped kernel's first: float8 values one rounding step
apart at most (its products round in another order), the amaxes within 1e-6. On the CPU (Triton's
interpreter) only that check runs, on small tensors.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_swiglu_gate_up.py [tokens ...]
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from trainperf.kernels import float8_mlp as mlp
from trainperf.kernels.float8_mlp import store_float8, tile_of, transpose_back

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FFN = 8192 if DEVICE == "cuda" else 256  # Llama-3.2-1B's
# (rows, columns, warps), TILE first: on the e4m3 product a program's loads are half the bytes
TILES = ((64, 128, 4), (64, 128, 8), (128, 128, 8), (64, 256, 4), (64, 256, 8), (32, 256, 4))
GU_INV = 1 / 16  # the inverse scale of the e4m3 gu the probe makes
Launch = Callable[[], None]


@triton.jit
def _swiglu_lean(GU, Y, YT, SCALE, AMAX, GU_INV, GU_AMAX, T, F, FMAX: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr):
    """The shipped forward kernel on an e4m3 gu with its amax, in fewer instructions an element."""
    scale = tl.load(SCALE)
    inv = tl.load(GU_INV)
    r, c, mask = tile_of(T, F, BM, BN, False)
    g8, u8 = mlp._gate_up(GU, r, c, mask, F)  # the raw e4m3 values
    top = tl.max(tl.max(tl.maximum(tl.abs(g8), tl.abs(u8)), 1), 0)
    tl.atomic_max(GU_AMAX, tl.where(top >= FMAX, 2 * top, top) * inv, sem="relaxed")
    g = g8 * inv
    hu = g * tl.sigmoid(g) * u8  # h / inv
    tl.atomic_max(AMAX, tl.max(tl.max(tl.abs(hu), 1), 0) * inv, sem="relaxed")
    store_float8(hu, Y, r * F + c, mask, scale * inv, FMAX)
    transpose_back(Y, YT, T, F, F, T, BM, BN)


def outputs_for(gu: torch.Tensor, backward: bool) -> tuple[torch.Tensor, ...]:
    """What a launch writes (the float8 output, its transpose, its amax and the forward's amax of gu)
    and reads (the output's scale, gu's inverse scale)."""
    t, f = gu.shape[0], gu.shape[1] // 2
    y = mlp.with_transpose(t, 2 * f if backward else f, mlp.E5M2 if backward else mlp.E4M3, gu.device)
    scale = torch.full((1,), 1024.0 if backward else 4.0, device=gu.device)
    return (*y, torch.zeros(2, device=gu.device), scale, torch.full((8,), GU_INV, device=gu.device))


def launch(gu: torch.Tensor, dh: torch.Tensor | None, out: tuple[torch.Tensor, ...],
           tile: tuple[int, int, int], form: str) -> Launch:
    """A launch over gu (and dh, the backward's) of the shipped kernel (`form` "shipped", or "no amax"
    of gu in the forward) or of the `lean` forward, writing into `out` (outputs_for)."""
    y, yt, amax, scale, inv = out
    t, f = gu.shape[0], gu.shape[1] // 2
    bm, bn, warps = tile
    fp8 = gu.dtype == mlp.E4M3
    grid = (triton.cdiv(t, bm), triton.cdiv(f, bn))
    fmax = mlp.float8_max(y.dtype)
    if dh is not None:
        return lambda: mlp._swiglu_bwd_kernel[grid](dh, gu, y, yt, scale, amax, t, f, FMAX=fmax, BM=bm, BN=bn,
                                                    GU_INV=inv if fp8 else None, num_warps=warps)
    if form == "lean":
        return lambda: _swiglu_lean[grid](gu, y, yt, scale, amax, inv, amax[1:], t, f, FMAX=fmax, BM=bm,
                                          BN=bn, num_warps=warps)
    return lambda: mlp._swiglu_kernel[grid](
        gu, y, yt, scale, amax, t, f, FMAX=fmax, BM=bm, BN=bn, GU_INV=inv if fp8 else None,
        GU_AMAX=amax[1:] if fp8 and form == "shipped" else None, num_warps=warps)


def check_lean(gu: torch.Tensor, tile: tuple[int, int, int]) -> str:
    """How far the `lean` forward's outputs at `tile` lie from the shipped kernel's at TILE."""
    ref, out = outputs_for(gu, False), outputs_for(gu, False)
    launch(gu, None, ref, (*mlp.TILE, mlp.WARPS), "shipped")()
    launch(gu, None, out, tile, "lean")()
    steps = max((a.view(torch.uint8).int() - b.view(torch.uint8).int()).abs().max().item()
                for a, b in zip(out[:2], ref[:2], strict=True))
    amax = ((out[2] - ref[2]).abs() / ref[2].clamp(min=1e-30)).max().item()
    if steps > 1 or amax > 1e-6:
        raise AssertionError(f"lean at {tile} is {steps} float8 steps and {amax:.1e} of the amax off")
    return f"{steps} step(s), amaxes {amax:.0e} apart"


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
            gu, _ = gate_up(tokens)
            for tile in TILES:
                checked = check_lean(gu, tile)
                print(f"{tokens} tokens, lean at {tile}: {checked} (the interpreter)", flush=True)
        return
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for tokens in map(int, sys.argv[1:] or ["16384", "12288"]):
        gu_fp8, dh = gate_up(tokens)
        gu_bf16 = (gu_fp8.float() * GU_INV).bfloat16()
        cast = functools.partial(mlp.cast_transposed, dh, mlp.ScaleState(dh.device), mlp.X, mlp.E4M3)
        ms = triton.testing.do_bench(cast, warmup=50, rep=300)
        print(f"{tokens} tokens: plain cast of h [{tokens}, {FFN}] bf16: {ms * 1e3:.1f} us "
              f"({3 * dh.numel() / ms / 1e9:.2f} TB/s)", flush=True)
        for name, gu, grad, form, tiles in (
                ("forward, bf16 gu", gu_bf16, None, "shipped", TILES[:1]),
                ("forward, e4m3 gu, no amax", gu_fp8, None, "no amax", TILES[:1]),
                ("forward, e4m3 gu", gu_fp8, None, "shipped", TILES[:1]),
                ("forward lean", gu_fp8, None, "lean", TILES),
                ("backward, bf16 gu", gu_bf16, dh, "shipped", TILES[:1]),
                ("backward, e4m3 gu", gu_fp8, dh, "shipped", TILES)):
            for tile in tiles:
                checked = check_lean(gu, tile) if form == "lean" else ""
                ms = triton.testing.do_bench(launch(gu, grad, outputs_for(gu, grad is not None), tile, form),
                                             warmup=50, rep=300)
                moved = gu.numel() * gu.element_size() + gu.numel() * (1 if grad is None else 2)
                moved += 0 if grad is None else grad.numel() * grad.element_size()
                print(f"{tokens} tokens: {name:25s} tile {tile[0]}x{tile[1]} {tile[2]} warps: "
                      f"{ms * 1e3:7.1f} us ({moved / ms / 1e9:.2f} TB/s) {checked}", flush=True)


if __name__ == "__main__":
    main()
