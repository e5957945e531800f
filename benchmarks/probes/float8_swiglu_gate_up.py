"""Why is the SwiGLU kernel slower on a float8 gate and up product than on a bf16 one, and does a
leaner kernel fix it?

trainperf's float8 MLP has cuBLAS write the gate and up product `gu` as e4m3
(kernels/float8_mlp.py GATE_UP_IN_FLOAT8), which the SwiGLU kernel then reads at half the bytes.
In one profiled iteration of `fp8-trainperf-all` at 1 x 16384 the kernel took 385 us a layer on it,
against 230 us on the bf16 product of an earlier profile. Compiled for sm_90, its PTX holds about
40 instructions a (g, u) pair on the e4m3 product against 23 on the bf16 one (the dequantizing
multiplies and the saturation-aware amax of `gu`, element by element), at which rate issuing them
takes about as long as moving the bytes. `lean` is a candidate with fewer: the amax of `gu` taken
from the raw e4m3 values (one tile maximum, scaled and doubled where it reached e4m3's maximum),
u left unscaled (its inverse scale folds into h's amax and output scale), and no masks where the
tile divides the tensor.

This times the shipped kernel at the step's shapes on a bf16 `gu`, and on an e4m3 `gu` without and
with the amax of `gu`, beside `lean` at a few tiles and warp counts (medians of `do_bench`) and the
plain cast of a tensor of h's size (the bandwidth it could reach). `lean`'s outputs are checked
against the shipped kernel's first: float8 values one rounding step apart at most (its products
round in another order), the amaxes within a float32 rounding. On the CPU (Triton's interpreter)
only those checks run, on a small tensor.
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
from trainperf.kernels.float8_mlp import tile_of, transpose_back

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FFN = 8192 if DEVICE == "cuda" else 256  # Llama-3.2-1B's
# (rows, columns, warps), TILE first: on the e4m3 product a program's loads are half the bytes
TILES = ((64, 128, 4), (64, 128, 8), (128, 128, 8), (64, 256, 4), (64, 256, 8), (32, 256, 4))


@triton.jit
def _swiglu_lean(GU, Y, YT, SCALE, AMAX, GU_INV, GU_AMAX, T, F, FMAX: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr, EVEN: tl.constexpr):
    """The shipped kernel on an e4m3 gu with its amax, in fewer instructions an element."""
    scale = tl.load(SCALE)
    inv = tl.load(GU_INV)
    r, c, mask = tile_of(T, F, BM, BN, False)
    at = GU + r * (2 * F) + c
    if EVEN:
        g8 = tl.load(at).to(tl.float32)
        u8 = tl.load(at + F).to(tl.float32)
    else:
        g8 = tl.load(at, mask=mask, other=0.0).to(tl.float32)
        u8 = tl.load(at + F, mask=mask, other=0.0).to(tl.float32)
    top = tl.max(tl.max(tl.maximum(tl.abs(g8), tl.abs(u8)), 1), 0)
    tl.atomic_max(GU_AMAX, tl.where(top >= FMAX, 2 * top, top) * inv, sem="relaxed")
    g = g8 * inv
    hu = g * tl.sigmoid(g) * u8  # h / inv
    tl.atomic_max(AMAX, tl.max(tl.max(tl.abs(hu), 1), 0) * inv, sem="relaxed")
    y = tl.clamp(hu * (scale * inv), -FMAX, FMAX).to(Y.dtype.element_ty)
    if EVEN:
        tl.store(Y + r * F + c, y)
    else:
        tl.store(Y + r * F + c, y, mask=mask)
    transpose_back(Y, YT, T, F, F, T, BM, BN)


def launch(gu: torch.Tensor, outputs: tuple[torch.Tensor, ...], tile: tuple[int, int, int],
           form: str) -> Callable[[], None]:
    """A launch of the shipped kernel (`form` "shipped", or "no amax" of gu) or of `lean` over gu."""
    h8, h8t, scale, now, inv = outputs
    t, f = gu.shape[0], gu.shape[1] // 2
    bm, bn, warps = tile
    fp8, fmax = gu.dtype == mlp.E4M3, mlp.float8_max(mlp.E4M3)
    grid = (triton.cdiv(t, bm), triton.cdiv(f, bn))
    if form == "lean":
        even = t % bm == 0 and f % bn == 0
        return lambda: _swiglu_lean[grid](gu, h8, h8t, scale, now, inv, now[1:], t, f, FMAX=fmax, BM=bm,
                                          BN=bn, EVEN=even, num_warps=warps)
    return lambda: mlp._swiglu_kernel[grid](
        gu, h8, h8t, scale, now, t, f, FMAX=fmax, BM=bm, BN=bn, GU_INV=inv if fp8 else None,
        GU_AMAX=now[1:] if fp8 and form == "shipped" else None, num_warps=warps)


def outputs_for(gu: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What a launch writes (h8, h8t, the amaxes of h and gu) and reads (h's scale, gu's inverse)."""
    t, f = gu.shape[0], gu.shape[1] // 2
    return (*mlp.with_transpose(t, f, mlp.E4M3, gu.device), torch.full((1,), 4.0, device=gu.device),
            torch.zeros(2, device=gu.device), torch.full((8,), 1 / 16, device=gu.device))


def check_lean(gu: torch.Tensor, tile: tuple[int, int, int]) -> str:
    """How far `lean`'s outputs at `tile` lie from the shipped kernel's at TILE."""
    ref, out = outputs_for(gu), outputs_for(gu)
    launch(gu, ref, (*mlp.TILE, mlp.WARPS), "shipped")()
    launch(gu, out, tile, "lean")()
    steps = max((a.view(torch.uint8).int() - b.view(torch.uint8).int()).abs().max().item()
                for a, b in zip(out[:2], ref[:2], strict=True))
    amax = ((out[3] - ref[3]).abs() / ref[3]).max().item()
    if steps > 1 or amax > 1e-6:
        raise AssertionError(f"lean at {tile} is {steps} float8 steps and {amax:.1e} of the amax off")
    return f"{steps} step(s), amaxes {amax:.0e} apart"


def gate_up(tokens: int) -> torch.Tensor:
    """An e4m3 gate and up product at inverse scale 1/16, a few values at e4m3's maximum."""
    torch.manual_seed(0)
    gu = (torch.randn(tokens, 2 * FFN, device=DEVICE) * 48).clamp(-448, 448)
    gu[0, :4] = 448
    return gu.to(mlp.E4M3)


def main() -> None:
    if DEVICE != "cuda":
        for tokens in (192, 200):  # tiles that divide the tensor, and tiles that do not
            for tile in TILES:
                checked = check_lean(gate_up(tokens), tile)
                print(f"{tokens} tokens, lean at {tile}: {checked} (the interpreter)", flush=True)
        return
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for tokens in map(int, sys.argv[1:] or ["16384", "12288"]):
        gu_fp8 = gate_up(tokens)
        gu_bf16 = (gu_fp8.float() / 16).bfloat16()
        h = torch.randn(tokens, FFN, device=DEVICE).bfloat16()
        cast = functools.partial(mlp.cast_transposed, h, mlp.ScaleState(h.device), mlp.X, mlp.E4M3)
        ms = triton.testing.do_bench(cast, warmup=50, rep=300)
        print(f"{tokens} tokens: plain cast of h [{tokens}, {FFN}] bf16: {ms * 1e3:.1f} us "
              f"({3 * h.numel() / ms / 1e9:.2f} TB/s)", flush=True)
        for name, gu, form, tiles in (("bf16 gu", gu_bf16, "shipped", TILES[:1]),
                                      ("e4m3 gu, no amax", gu_fp8, "no amax", TILES[:1]),
                                      ("e4m3 gu, its amax", gu_fp8, "shipped", TILES[:1]),
                                      ("lean", gu_fp8, "lean", TILES)):
            for tile in tiles:
                checked = check_lean(gu, tile) if form == "lean" else ""
                ms = triton.testing.do_bench(launch(gu, outputs_for(gu), tile, form), warmup=50, rep=300)
                moved = gu.numel() * gu.element_size() + gu.numel()  # gu read, h and its transpose written
                print(f"{tokens} tokens: {name:18s} tile {tile[0]}x{tile[1]} {tile[2]} warps: "
                      f"{ms * 1e3:7.1f} us ({moved / ms / 1e9:.2f} TB/s) {checked}", flush=True)


if __name__ == "__main__":
    main()
