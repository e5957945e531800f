"""What does the float8 LM head's logits gradient cost, made where it is cast or cast after?

The float8 head (kernels/float8_head.py) needs the chunk's logits gradient as e5m2 and its
transpose. Made in place in bf16 by the chunked loss's cross-entropy kernel and cast after, each
logit is read twice and written twice in bf16, then read again and written as two float8 bytes;
made by the cast kernel from the logits and their rows' logsumexp, it is read twice (once for the
logsumexp, once for the cast) and written as the two float8 bytes, the transposed tile read back
from the float8 tile just written. Both forms are checked against float64 and timed on one block of
logits in alternating rounds (median of each round), the fused form at a few tile shapes, beside
its earlier form, which computed the transposed tile again from the bf16 logits (`twice`).
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_logits_grad.py [rows] [vocab] [rounds]
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl

from trainperf.kernels import float8_head as head
from trainperf.kernels.cross_entropy import cross_entropy_grad_, cross_entropy_lse2
from trainperf.kernels.float8_linear import GRAD, linear_state
from trainperf.kernels.float8_mlp import (
    E5M2,
    WARPS,
    atomic_amax,
    float8_max,
    scale_and_cast,
    store_float8,
    tile_of,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU under TRITON_INTERPRET=1
TILES = ((64, 64, 8), (128, 64, 8), (64, 128, 8), (64, 128, 4), (128, 128, 16))


@triton.jit
def _grad_cast_twice(X, LSE, T, Y, YT, SCALE, AMAX, M, V, LDT, scale_n, FMAX: tl.constexpr,
                     BM: tl.constexpr, BN: tl.constexpr):
    """The kernel's earlier form: the transposed tile computed again from the logits."""
    r, c, mask = tile_of(M, V, BM, BN, False)
    g = head._logits_grad(X, LSE, T, r, c, mask, M, V, scale_n)
    atomic_amax(AMAX, g, mask)
    scale = tl.load(SCALE)
    store_float8(g, Y, r * V + c, mask, scale, FMAX)
    r, c, mask = tile_of(M, V, BM, BN, True)
    g = head._logits_grad(X, LSE, T, r, c, mask, M, V, scale_n)
    store_float8(g, YT, c * LDT + r, mask, scale, FMAX)


def main(rows: int = 8192, vocab: int = 128256, rounds: int = 5) -> None:
    torch.manual_seed(0)
    logits = (3 * torch.randn(rows, vocab, device=DEVICE)).bfloat16()
    targets = torch.randint(0, vocab, (rows,), device=DEVICE)
    n = 2 * rows  # the chunk is half of the tokens
    state = linear_state(torch.ones(16, 16, device=DEVICE)).tensors()
    g8t = torch.empty(vocab, rows, dtype=E5M2, device=DEVICE)
    _, g8 = head._cast_logits_grad(logits, targets, 1 / n, state, g8t, first=True)  # calibrates
    x = logits.double()
    ref = torch.softmax(x, -1)
    ref[torch.arange(rows), targets] -= 1
    ref /= n
    inv = state[3][GRAD, 0].item()
    err = ((g8.double() * inv - ref).norm() / ref.norm()).item()
    print(f"fused e5m2 gradient against float64: relative error {err:.4f} (e5m2 keeps 2 mantissa bits)")
    del x, ref
    buf = logits.clone()

    def after() -> None:  # the bf16 gradient in place, cast after
        cross_entropy_grad_(buf, targets, 1 / n)
        scale_and_cast(buf, state, GRAD, E5M2)

    def fused(bm: int, bn: int, warps: int, twice: bool = False) -> torch.Tensor:
        _, lse2 = cross_entropy_lse2(logits, targets)
        y = torch.empty(rows, vocab, dtype=E5M2, device=DEVICE)
        args = (logits, lse2, targets, y, g8t, state[2][GRAD:], state[1][GRAD:], rows, vocab, rows, 1 / n)
        grid = triton.cdiv(rows, bm), triton.cdiv(vocab, bn)
        tile = dict(FMAX=float8_max(E5M2), BM=bm, BN=bn, num_warps=warps)
        if twice:
            _grad_cast_twice[grid](*args, **tile)
        else:
            head._grad_cast_kernel[grid](*args, **tile, CAST=True)
        return y

    fused(*head.GRAD_TILE, WARPS)
    want = g8.view(torch.uint8).clone(), g8t.view(torch.uint8).clone()
    got = fused(*head.GRAD_TILE, WARPS, twice=True).view(torch.uint8), g8t.view(torch.uint8)
    print(f"twice against the kernel: {'equal' if all(map(torch.equal, got, want)) else 'DIFFERENT'}")
    if DEVICE == "cpu":  # the interpreter checks the forms; timing them needs a GPU
        return
    forms = {"bf16 in place, cast after": after,
             **{f"fused, tile {bm}x{bn}, {w} warps": (lambda bm=bm, bn=bn, w=w: fused(bm, bn, w))
                for bm, bn, w in TILES},
             **{f"twice, tile {bm}x{bn}, {w} warps": (lambda bm=bm, bn=bn, w=w: fused(bm, bn, w, True))
                for bm, bn, w in TILES}}
    times: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(rounds):
        for name, fn in forms.items():
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100))
    gb = rows * vocab * 1e-9
    for name, ms in times.items():
        print(f"{name:32s} {statistics.median(ms):7.3f} ms  ({gb:.2f} G logits)")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
