"""Time each triton-fa2 kernel (forward, dK/dV, dQ) with every tile shape, one at a time.

For each candidate: registers per thread, spilled bytes, shared memory, how many programs fit
on one SM (registers and shared memory are the limits), time (median of do_bench) and the
kernel's matrix-product rate. Candidates are the autotuning lists plus the EXTRA shapes below,
so a shape can be measured before it joins the lists. Causal, bf16. `dkdv-atomic` is the fused
backward of `triton-fa2-atomic` (dK/dV plus dQ's shares, by the TMA unit where there is one).
Usage: PYTHONPATH=src python3 benchmarks/probes/fa2_kernel_configs.py B H N D [out.csv [kernels]]
       (kernels: comma-separated, default fwd,dkdv,dq)
"""

from __future__ import annotations

import csv
import functools
import sys

import torch
import triton
from triton.testing import do_bench

from trainperf.attention import flash_triton as ft

EXTRA = {  # (BLOCK_M, BLOCK_N, warps, stages[, register cap]) not (yet) in the autotuning lists
    "fwd": [(64, 64, 4, 2), (64, 32, 4, 3), (128, 64, 8, 4), (128, 32, 8, 3),
            (64, 128, 4, 3), (64, 128, 4, 2), (64, 128, 8, 3), (32, 64, 4, 3)],
    # deeper pipelines, since descriptor loads leave registers free (shapes capped at 168
    # registers, so that three programs fit on an SM, measured slower)
    "dkdv": [(32, 64, 4, 3), (64, 128, 8, 4), (32, 128, 8, 3), (64, 64, 4, 4),
             (64, 64, 4, 5), (32, 64, 4, 5)],
    "dq": [(64, 64, 4, 2), (64, 32, 4, 3), (128, 64, 8, 4), (128, 32, 8, 3),
           (64, 128, 4, 2), (64, 128, 8, 3), (32, 64, 4, 3)],
}
EXTRA["dkdv-atomic"] = EXTRA["dkdv-cp.async"] = EXTRA["dkdv"]
EXTRA["dq-cp.async"] = EXTRA["dq"]
REGS_PER_SM, SMEM_PER_SM, SMEM_RESERVED = 65536, 233472, 1024


def programs_per_sm(regs: int, smem: int, warps: int) -> int:
    """Resident programs per SM (H100: 64K registers, 228 KB shared memory, 64 warps)."""
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    return min(REGS_PER_SM // (per_warp * warps), SMEM_PER_SM // (smem + SMEM_RESERVED), 64 // warps)


def candidates(name: str, lists: list[triton.Config]) -> list[tuple[int, ...]]:
    listed = [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in lists]
    return listed + [c for c in EXTRA[name] if c not in listed]


def kernel_table(b: int, h: int, n: int, d: int) -> tuple[dict, dict, float]:
    """Causal bf16 inputs of one shape and, per kernel name: (kernel, autotuning list, matrix
    products, the grid's block, arguments, constexprs); then the launch constexprs and the FLOP
    of one causal QKᵀ-sized product."""
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    scale = d ** -0.5
    args = ft._launch_args(q)
    o = torch.empty_like(q)
    lse = torch.empty((b * h, n), device="cuda", dtype=torch.float32)
    ft._fwd_kernel[lambda m: (triton.cdiv(n, m["BLOCK_M"]), b * h)](q, k, v, o, lse, scale * ft.LOG2E, n,
                                                                    CAUSAL=True, **args)
    delta = (o.float() * do.float()).sum(-1).reshape(b * h, n)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    tma = ft._use_tma(q)  # also sets Triton's allocator for device-side descriptors
    inputs, scales = (q, k, v, do, lse, delta), (scale * ft.LOG2E, scale, n)
    dkdv = (ft._bwd_dkdv_kernel, ft.DKDV_CONFIGS, 4, "BLOCK_N", (*inputs, dk, dv, dq, *scales))
    dq_kernel = (ft._bwd_dq_kernel, ft.DQ_CONFIGS, 3, "BLOCK_M", (q, k, v, o, *inputs[3:], dq, *scales))
    kernels = {
        "fwd": (ft._fwd_kernel, ft.FWD_CONFIGS, 2, "BLOCK_M", (q, k, v, o, lse, scale * ft.LOG2E, n), {}),
        "dkdv": (*dkdv, {"ATOMIC_DQ": False, "TMA": tma}),
        "dkdv-cp.async": (*dkdv, {"ATOMIC_DQ": False, "TMA": False}),
        "dkdv-atomic": (ft._bwd_dkdv_kernel, ft.DKDV_CONFIGS, 5, "BLOCK_N",
                        (*inputs, dk, dv, dq.float(), *scales), {"ATOMIC_DQ": True, "TMA": tma}),
        "dq": (*dq_kernel, {"TMA": tma}),
        "dq-cp.async": (*dq_kernel, {"TMA": False}),
    }
    return kernels, args, 2 * b * h * n * n * d / 2


def main(b: int, h: int, n: int, d: int, out: str | None = None, only: str = "fwd,dkdv,dq") -> None:
    kernels, args, product = kernel_table(b, h, n, d)
    kernels = {name: kernels[name] for name in only.split(",")}
    rows = []
    for name, (kernel, lists, products, grid_block, kargs, extra) in kernels.items():
        for bm, bn, w, s, *cap in candidates(name, lists):
            meta = {"BLOCK_M": bm, "BLOCK_N": bn}
            grid = (triton.cdiv(n, meta[grid_block]), b * h)
            launch = functools.partial(kernel.fn[grid], *kargs, CAUSAL=True, num_warps=w, num_stages=s,
                                       maxnreg=cap[0] if cap else None, **meta, **extra, **args)
            try:
                compiled = launch()
                ms = do_bench(launch, warmup=25, rep=100)
            except Exception as e:  # noqa: BLE001 - a shape that does not compile is a result too
                print(f"{name} {bm}x{bn} w{w} s{s} cap{cap}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            row = {"kernel": name, "BLOCK_M": bm, "BLOCK_N": bn, "warps": w, "stages": s,
                   "maxnreg": cap[0] if cap else "", "regs": compiled.n_regs,
                   "spill_bytes": compiled.n_spills,
                   "smem": compiled.metadata.shared,
                   "per_sm": programs_per_sm(compiled.n_regs, compiled.metadata.shared, w),
                   "ms": round(ms, 4), "tflops": round(products * product / ms / 1e9, 1),
                   "listed": (bm, bn, w, s, *cap) not in EXTRA[name]}
            rows.append(row)
            print(row, flush=True)
    for name in kernels:
        best = min((r for r in rows if r["kernel"] == name), key=lambda r: r["ms"])
        print(f"fastest {name}: {best}")
    if out:
        write_csv(rows, out)


def write_csv(rows: list[dict], out: str) -> None:
    """Rows of one probe (dicts with the same keys) as a CSV file."""
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:5]), *(sys.argv[5:7]))
