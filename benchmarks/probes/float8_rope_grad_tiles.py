"""How many rows of a head should a program of the RoPE-gradient cast take?

trainperf's float8 attention casts the stacked gradient of each layer's q, k and v product with q's
and k's gradients taken back through RoPE, in one kernel whose programs each take `rows` rows of
one head (kernels/float8_linear.py launch_rope_grad_cast). In the Llama-3.2-1B step at 1 x 16384
it moves its bytes at about 2.5 TB/s (benchmarks/results/explorations/h200-2026-12-03/). This probe
times it at several row counts and warp counts on the step's shapes, beside the form it replaced
(`apart`: Inductor's kernel for RoPE's backward writing the stacked bf16 gradient, then the plain
float8 cast reading it), each as a CUDA graph of back-to-back launches in alternating rounds
(median per launch; the graphs and rounds of float8_cast_atomics.py). Every tile's float8 outputs
and amax are checked equal to the shipped tile's first; on the CPU (Triton's interpreter) only
that check runs.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_rope_grad_tiles.py [rounds]
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
from float8_cast_atomics import graph_of, medians_in_rounds  # the graphs and rounds of the casts' probe

from trainperf.kernels import float8_linear as f8l
from trainperf.kernels import float8_mlp as mlp

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# (batch, seq, query heads, key/value heads, head dim): Llama-3.2-1B's step, Llama-3.1-8B's heads
SHAPES = {"1B 1x16384": (1, 16384, 32, 8, 64), "1B 12x1024": (12, 1024, 32, 8, 64),
          "8B 1x16384": (1, 16384, 32, 8, 128)} if DEVICE == "cuda" else {"tiny": (2, 40, 4, 2, 64)}
TILES = ((mlp.TILE[0], mlp.WARPS), (32, 4), (64, 8), (128, 4), (128, 8))  # (rows, warps), shipped first


def inputs(b: int, t: int, hq: int, hk: int, d: int) -> tuple[torch.Tensor, ...]:
    """The gradients of q, k and v as attention hands them back ([batch, seq, heads, D]) and the
    step's cos and sin."""
    grads = [torch.randn(b, t, h, d, device=DEVICE).bfloat16() for h in (hq, hk, hk)]
    angles = torch.rand(1, t, d // 2, device=DEVICE) * 100
    emb = torch.cat([angles, angles], dim=-1)
    return (*grads, emb.cos().bfloat16(), emb.sin().bfloat16())


def outputs(b: int, t: int, hq: int, hk: int, d: int) -> tuple[torch.Tensor, ...]:
    y, yt = mlp.with_transpose(b * t, (hq + 2 * hk) * d, mlp.E5M2, torch.device(DEVICE))
    return y, yt, torch.full((1,), 1000.0, device=DEVICE), torch.zeros(1, device=DEVICE)


def fused(rows: int, warps: int) -> Callable[..., None]:
    return lambda *args: f8l.launch_rope_grad_cast(*args, rows=rows, warps=warps)


def apart() -> Callable[..., None]:
    # transformers' RoPE backward in bf16 with the stack after it, as Inductor compiles it in the step
    compiled = torch.compile(functools.partial(f8l.qkv_rope_grad_reference, dtype=torch.bfloat16))

    def launch(dq, dk, dv, cos, sin, y, yt, scale, amax) -> None:  # noqa: ANN001
        g = compiled(dq, dk, dv, cos, sin)
        m, n = g.shape
        mlp._cast_kernel[mlp.tile_grid(m, n)](g, y, yt, scale, amax, m, n, FMAX=mlp.float8_max(mlp.E5M2),
                                              BM=mlp.TILE[0], BN=mlp.TILE[1], num_warps=mlp.WARPS)
    return launch


def check(label: str, shape: tuple[int, ...], forms: dict[str, Callable[..., None]]) -> None:
    """Every tile writes what the shipped tile writes, bit for bit, and the same amax."""
    args, want = inputs(*shape), None
    for name, launch in forms.items():
        if name == "apart":  # rounds the gradient to bf16 before its cast: not the same bits
            continue
        out = outputs(*shape)
        launch(*args, *out)
        got = [o.view(torch.uint8) if o.dtype == mlp.E5M2 else o for o in (out[0], out[1], out[3])]
        want = want or got
        same = all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        print(f"{label}: {name}: {'equal' if same else 'DIFFERENT'}", flush=True)


def main(rounds: int = 7) -> None:
    forms = {f"{rows} rows, {warps} warps": fused(rows, warps) for rows, warps in TILES}
    if DEVICE == "cuda":
        forms["apart"] = apart()
        print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for label, shape in SHAPES.items():
        check(label, shape, forms)
        if DEVICE != "cuda":
            continue
        args = (*inputs(*shape), *outputs(*shape))
        medians = medians_in_rounds({name: graph_of(launch, args) for name, launch in forms.items()}, rounds)
        moved = sum(t.numel() for t in args[:3]) * 4  # bf16 in; float8 and its transpose out
        for name, ms in medians.items():
            print(f"  {label:11s} {name:18s} {ms * 1e3:7.1f} us  {moved / ms / 1e9:5.2f} TB/s  "
                  f"{medians['apart'] / ms:5.2f}x apart", flush=True)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
