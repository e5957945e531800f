"""Where a first call of triton-fa2 spends its time: each autotuning candidate's compile time,
alone and all candidates compiled at once in threads (Triton's AsyncCompileMode), and each
candidate's timing run as the autotuner does it. One process per (kernel, dtype, mode), each with
an empty Triton cache.

    python3 benchmarks/probes/compile_times.py B H N D DTYPE
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

KERNELS = ("fwd", "dq", "dkdv")


def kernel_and_args(name: str, shape: list[int], dtype_name: str):
    import torch
    import triton

    from trainperf.attention import flash_triton as ft

    dtype = getattr(torch, dtype_name)
    b, h, n, d = shape
    q, k, v, o, do = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(5))
    lse, delta = (torch.randn(b * h, n, device="cuda", dtype=torch.float32) for _ in range(2))
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    args = ft._launch_args(q)
    scales = (0.125 * ft.LOG2E, 0.125, n)
    tma = ft._use_tma(q)
    if name == "fwd":
        return (ft._fwd_kernel, "BLOCK_M", (q, k, v, o, lse, 0.125 * ft.LOG2E, n),
                {"CAUSAL": True, **args}, b * h, n, triton)
    if name == "dq":
        return (ft._bwd_dq_kernel, "BLOCK_M", (q, k, v, o, do, lse, delta, dq, *scales),
                {"CAUSAL": True, "TMA": tma, **args}, b * h, n, triton)
    return (ft._bwd_dkdv_kernel, "BLOCK_N", (q, k, v, do, lse, delta, dk, dv, dk, *scales),
            {"CAUSAL": True, "ATOMIC_DQ": False, "TMA": tma, **args}, b * h, n, triton)


def child(name: str, shape: list[int], dtype_name: str, mode: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    kernel, block, args, constexprs, bh, n, triton = kernel_and_args(name, shape, dtype_name)
    kernel.nargs = dict(zip(kernel.arg_names, args, strict=False))
    configs = kernel.prune_configs(constexprs)
    kernel.nargs = None
    grid = lambda meta: (triton.cdiv(n, meta[block]), bh)  # noqa: E731
    out = {"kernel": name, "dtype": dtype_name, "mode": mode, "candidates": len(configs)}
    t0 = time.perf_counter()
    if mode == "parallel":
        with ThreadPoolExecutor(len(configs)) as pool, triton.AsyncCompileMode(pool, ignore_errors=True):
            kernel.warmup(*args, grid=grid, **constexprs)
        out["compile_s"] = time.perf_counter() - t0
    else:
        each = []
        for c in configs:
            t = time.perf_counter()
            try:
                kernel.fn.warmup(*args, grid=grid, **constexprs, **c.all_kwargs())
            except Exception as exc:  # noqa: BLE001 - a candidate that fails is reported
                each.append((str(c), f"failed: {type(exc).__name__}"))
                continue
            each.append((str(c), round(time.perf_counter() - t, 2)))
        out["compile_s"] = time.perf_counter() - t0
        out["each"] = each
        bench = time.perf_counter()
        for c in configs:
            fn = lambda c=c: kernel.fn[grid](*args, **constexprs, **c.all_kwargs())  # noqa: E731
            with contextlib.suppress(Exception):  # the autotuner skips such a candidate too
                triton.testing.do_bench(fn, quantiles=(0.5, 0.2, 0.8))
        out["bench_s"] = time.perf_counter() - bench
    print(json.dumps(out))


def main(shape: list[int], dtype: str) -> None:
    for name in KERNELS:
        for mode in ("sequential", "parallel"):
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TRITON_CACHE_DIR": cache}
                cmd = [sys.executable, __file__, "--child", name, json.dumps(shape), dtype, mode]
                try:
                    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=200)
                    print(res.stdout.strip() or res.stderr.strip().splitlines()[-1], flush=True)
                except subprocess.TimeoutExpired:
                    print(json.dumps({"kernel": name, "dtype": dtype, "mode": mode,
                                      "status": "over 200 s"}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        main([int(x) for x in sys.argv[1:5]], sys.argv[5])
