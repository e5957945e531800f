"""Does RoPE's forward on the float8 q, k and v product's output pay as a Triton kernel of its own?

With RoPE inside the float8 q, k and v product (kernels/float8_linear.py float8_qkv_rope), the
product's bf16 output [tokens, (Hq + 2·Hk)·D] was rotated by Inductor: in a profiled iteration of
the Llama-3.2-1B step at 1 x 16384 its two kernels took 64.5 us (q) and 18.1 us (k) a layer, about
2 TB/s of the bytes they read and write (benchmarks/results/explorations/h200-2026-12-04/profiles/),
where the plain float8 cast moves 2.7-3.7 TB/s. trainperf now rotates q and k in one kernel
(`rope_qk`). This times, on the step's shapes:
- `inductor`: the product's split and rotation as transformers writes them, compiled;
- `R rows, W warps`: trainperf's kernel (`_rope_qk_kernel`), a program per R rows of one head, at
  several tiles (the shipped one is float8_linear.ROPE_ROWS, ROPE_WARPS).
Each is first checked against float64 (and in bf16 steps against `inductor`), then timed as a CUDA
graph of back-to-back launches in alternating rounds (median per launch; the graphs and rounds of
float8_cast_atomics.py). On the CPU (Triton's interpreter) only the checks run, in float16.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_rope_forward.py [rounds]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import triton
from float8_cast_atomics import graph_of, medians_in_rounds  # the graphs and rounds of the casts' probe

from trainperf.kernels import float8_linear as f8l

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter rounds bf16 wrong
# (batch, seq, query heads, key/value heads, head dim): Llama-3.2-1B's step, Llama-3.1-8B's heads
SHAPES = {"1B 1x16384": (1, 16384, 32, 8, 64), "1B 12x1024": (12, 1024, 32, 8, 64),
          "8B 1x16384": (1, 16384, 32, 8, 128)} if DEVICE == "cuda" else {"tiny": (2, 40, 4, 2, 64)}
TILES = ((32, 4), (64, 4), (64, 8), (128, 4), (128, 8))  # (rows, warps)


def inputs(b: int, t: int, hq: int, hk: int, d: int) -> tuple[torch.Tensor, ...]:
    """The product's output as the float8 GEMM writes it, the step's cos and sin, and q and k."""
    qkv = torch.randn(b * t, (hq + 2 * hk) * d, device=DEVICE).to(DTYPE)
    angles = torch.rand(1, t, d // 2, device=DEVICE) * 100
    emb = torch.cat([angles, angles], dim=-1)
    q, k = (torch.empty(b, t, h, d, device=DEVICE, dtype=DTYPE) for h in (hq, hk))
    return qkv, emb.cos().to(DTYPE), emb.sin().to(DTYPE), q, k


def rotated(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: tuple[int, int, int],
            b: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k as the step computes them from the product (kernels/float8_linear.py _rotated_qkv)."""
    q, k, _ = qkv.view(b, t, sum(heads), -1).split(heads, dim=-2)
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)
    return tuple(x * c + f8l.rotate_half(x) * s for x in (q, k))


Launch = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def candidate(rows: int, warps: int) -> Launch:
    def launch(qkv, cos, sin, q, k):  # noqa: ANN001, ANN202
        b, t, hq, d = q.shape
        hk = k.shape[2]
        f8l._rope_qk_kernel[triton.cdiv(b * t, rows), hq + hk](
            qkv, cos, sin, q, k, b * t, qkv.shape[1], t, hq, hk, cos.stride(0) if cos.shape[0] > 1 else 0,
            cos.stride(1), D=d, BM=rows, num_warps=warps)
        return q, k
    return launch


def inductor(heads: tuple[int, int, int]) -> Launch:
    """The compiled rotation, writing q and k where its own outputs go, as in the step. Static
    shapes: otherwise the second shape recompiles `rotated` for any shape, a slower kernel than the
    step's (which compiles for its one shape)."""
    compiled = torch.compile(rotated, dynamic=False) if DEVICE == "cuda" else rotated
    return lambda qkv, cos, sin, q, k: compiled(qkv, cos, sin, heads, q.shape[0], q.shape[1])


def check(label: str, args: tuple[torch.Tensor, ...], forms: dict[str, Launch],
          heads: tuple[int, int, int]) -> None:
    """Each form's q and k against float64, and against Inductor's (on the GPU the compiled
    rotation rounds once, from float32, as the kernel does; on the CPU it runs eagerly, rounding
    after each operation)."""
    qkv, cos, sin, q, _ = args
    b, t = q.shape[:2]
    want = rotated(qkv.double(), cos.double(), sin.double(), heads, b, t)
    base = None
    for name, launch in forms.items():
        got = tuple(x.clone() for x in launch(*args))
        errors = [((g.double() - w).norm() / w.norm()).item() for g, w in zip(got, want, strict=True)]
        if max(errors) > 1e-2:
            raise AssertionError(f"{label}: {name}: q and k off float64 by {errors[0]:.2e}, {errors[1]:.2e}")
        base = base or got
        apart = torch.cat([(g != w).flatten() for g, w in zip(got, base, strict=True)]).float().mean()
        most = max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item()
                   for g, w in zip(got, base, strict=True))
        print(f"{label}: {name:16s} against float64 {errors[0]:.2e}, {errors[1]:.2e}; against "
              f"{next(iter(forms))}: {apart.item():.2e} of the values apart, by at most {most:.1e} of the "
              f"largest", flush=True)


def main(rounds: int = 7) -> None:
    if DEVICE == "cuda":
        print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for label, (b, t, hq, hk, d) in SHAPES.items():
        heads = (hq, hk, hk)
        forms = {"inductor": inductor(heads)}
        forms.update({f"{rows} rows, {warps} warps": candidate(rows, warps) for rows, warps in TILES})
        args = inputs(b, t, hq, hk, d)
        check(label, args, forms, heads)
        if DEVICE != "cuda":
            continue
        medians = medians_in_rounds({name: graph_of(launch, args) for name, launch in forms.items()}, rounds)
        moved = 2 * (args[3].numel() + args[4].numel()) * 2  # q's and k's part read, q and k written
        for name, ms in medians.items():
            print(f"  {label:11s} {name:16s} {ms * 1e3:7.1f} us  {moved / ms / 1e9:5.2f} TB/s  "
                  f"{medians['inductor'] / ms:5.2f}x inductor", flush=True)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
