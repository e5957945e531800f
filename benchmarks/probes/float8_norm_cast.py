"""Would a float8 cast that computes the RMSNorm before it save a pass over the normed activations?

In trainperf's float8 step each decoder layer's two RMSNorms (before attention, before the MLP)
are compiled by Inductor, which writes the normed activations in bf16; the float8 product after
each then casts them (`_cast_kernel`, kernels/float8_mlp.py), reading them back. Per norm that is
a write and a read of [tokens, width] in bf16 that a kernel doing both never makes: 128 MB at
16384 x 2048, about 36 us at 3.5 TB/s, 32 norms a Llama-3.2-1B step. This times the two kernels
the step runs (Inductor's norm, HF's LlamaRMSNorm arithmetic, then the shipped cast) against
`_norm_cast_kernel`: each program takes BM whole rows, sums their squares over the row in BN-wide
chunks, then normalizes, casts and writes each chunk with its transpose (`transpose_back`), the
row block read twice (the second time mostly from L2). It rounds as HF's norm does (the normed
row to bf16, times the bf16 weight to bf16; float16 on the CPU), so its float8 bytes are the two
kernels' up to the order of the sum of squares; the probe checks that first. The backward (the norm's gradient
from the product's input gradient) is not here. On the CPU (Triton's interpreter) only the check
runs, on small tensors.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_norm_cast.py [tokens ...]
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from trainperf.kernels import float8_mlp as mlp
from trainperf.kernels.float8_mlp import store_float8, transpose_back
from trainperf.kernels.float8_norm import rms_norm_reference

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
WIDTH = 2048 if DEVICE == "cuda" else 256  # Llama-3.2-1B's
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter rounds bf16 wrong
EPS = 1e-5
TILES = ((16, 256, 4), (32, 128, 4), (32, 256, 8), (64, 128, 8))  # (rows, chunk columns, warps)


@triton.jit
def _norm_cast_kernel(X, W, Y, YT, SCALE, AMAX, M, N, eps, FMAX: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr):
    """Y = rms_norm(X)·W·scale and YT = Yᵀ as float8, the amax of rms_norm(X)·W into AMAX."""
    scale = tl.load(SCALE)
    rows = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)[:, None]
    cols = tl.arange(0, BN)[None, :]
    squares = tl.zeros([BM, BN], tl.float32)
    for c0 in range(0, N, BN):
        mask = (rows < M) & (c0 + cols < N)
        x = tl.load(X + rows * N + c0 + cols, mask=mask, other=0.0).to(tl.float32)
        squares += x * x
    rstd = tl.rsqrt(tl.sum(squares, 1) / N + eps)[:, None]
    DTYPE: tl.constexpr = X.dtype.element_ty
    top = tl.zeros([BM, BN], tl.float32)
    for c0 in range(0, N, BN):
        mask = (rows < M) & (c0 + cols < N)
        x = tl.load(X + rows * N + c0 + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + c0 + cols, mask=c0 + cols < N, other=0.0).to(tl.float32)
        y = (w * (x * rstd).to(DTYPE).to(tl.float32)).to(DTYPE).to(tl.float32)  # as HF's norm rounds
        top = tl.maximum(top, tl.abs(y))
        store_float8(y, Y, rows * N + c0 + cols, mask, scale, FMAX)
        transpose_back(Y + c0, YT + c0 * M, M, N - c0, N, M, BM, BN)  # a 1-D grid: program_id(1) is 0
    tl.atomic_max(AMAX, tl.max(tl.max(top, 1), 0), sem="relaxed")


def outputs(tokens: int) -> tuple[torch.Tensor, ...]:
    y, yt = mlp.with_transpose(tokens, WIDTH, mlp.E4M3, torch.device(DEVICE))
    return y, yt, torch.full((1,), 8.0, device=DEVICE), torch.zeros(1, device=DEVICE)


def two_kernels(x: torch.Tensor, weight: torch.Tensor, out: tuple[torch.Tensor, ...]):
    """Inductor's norm (eager on the CPU), then the shipped cast: what the step runs."""
    norm = torch.compile(rms_norm_reference) if DEVICE == "cuda" else rms_norm_reference
    y, yt, scale, amax = out
    bm, bn = mlp.TILE

    def run() -> None:
        h = norm(x, weight, EPS)
        grid = mlp.tile_grid(*h.shape)
        mlp._cast_kernel[grid](h, y, yt, scale, amax, *h.shape, FMAX=mlp.float8_max(y.dtype), BM=bm, BN=bn,
                               num_warps=mlp.WARPS)
    return run


def fused(x: torch.Tensor, weight: torch.Tensor, out: tuple[torch.Tensor, ...], tile: tuple[int, int, int]):
    y, yt, scale, amax = out
    bm, bn, warps = tile
    return lambda: _norm_cast_kernel[(triton.cdiv(x.shape[0], bm),)](
        x, weight, y, yt, scale, amax, *x.shape, EPS, FMAX=mlp.float8_max(y.dtype), BM=bm, BN=bn,
        num_warps=warps)


def check(ref: tuple[torch.Tensor, ...], out: tuple[torch.Tensor, ...], name: str) -> None:
    """The fused kernel's bytes are the two kernels' within one float8 step: the sum of squares'
    order differs, and Inductor skips HF's rounding of the normed row to bf16 before the weight
    (the fused kernel keeps it), which moves values near a float8 rounding point by one step;
    the same amax to float32 rounding. Prints the share of values one step apart."""
    steps = (out[0].view(torch.uint8).int() - ref[0].view(torch.uint8).int()).abs()
    share = (steps > 0).float().mean().item()
    if steps.max() > 1 or share > 0.05:
        raise AssertionError(f"{name}: {int((steps > 0).sum())} values differ, up to {int(steps.max())} "
                             "steps")
    print(f"  {name}: {share:.2%} of values one float8 step from the two kernels'", flush=True)
    if not torch.equal(out[1].view(torch.uint8), out[0].view(torch.uint8).t()):
        raise AssertionError(f"{name}: the transpose is not the output's")
    torch.testing.assert_close(out[3], ref[3], rtol=1e-2, atol=0)


def main(tokens: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(tokens, WIDTH, device=DEVICE).to(DTYPE)
    weight = (1 + 0.1 * torch.randn(WIDTH, device=DEVICE)).to(DTYPE)
    ref = outputs(tokens)
    runs = {"norm, then cast": two_kernels(x, weight, ref)}
    runs["norm, then cast"]()
    for tile in TILES:
        out = outputs(tokens)
        name = f"fused {tile[0]}x{tile[1]} {tile[2]} warps"
        runs[name] = fused(x, weight, out, tile)
        runs[name]()
        check(ref, out, name)
    print(f"{tokens} tokens x {WIDTH}: every fused tile writes the two kernels' float8 bytes within a step",
          flush=True)
    if DEVICE != "cuda":
        return
    moved = tokens * WIDTH * (2 + 1 + 1)  # the fused kernel's bf16 in, float8 out and transposed
    for name, run in runs.items():
        us = triton.testing.do_bench(run, warmup=50, rep=300) * 1e3
        print(f"  {name:28s} {us:7.1f} us ({moved / us / 1e6:.2f} TB/s of the fused kernel's bytes)",
              flush=True)


if __name__ == "__main__":
    if DEVICE == "cuda":
        print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for t in sys.argv[1:] or ([16384, 12288] if DEVICE == "cuda" else [96, 100]):
        main(int(t))
