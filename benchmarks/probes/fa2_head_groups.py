"""Time triton-fa2's causal kernels with each head-group size of their launch order (`_schedule`).

Each kernel runs with the tile shape the autotuner picks at this shape (tuned once, with the
library's HEAD_GROUP); then every group size is timed in turn, in rounds whose order flips, and
the median of the rounds is printed per size. Group 1 is the plain order (each head's
blocks heaviest first, head after head). Causal, bf16.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa2_head_groups.py B H N D [groups [rounds [out.csv]]]
       (groups: comma-separated, default 1,2,4,8,16)
"""

from __future__ import annotations

import functools
import statistics
import sys

import triton
from fa2_kernel_configs import kernel_table, write_csv
from triton.testing import do_bench


def main(b: int, h: int, n: int, d: int, groups: str = "1,2,4,8,16", rounds: int = 5,
         out: str | None = None) -> None:
    kernels, args, product = kernel_table(b, h, n, d)
    sizes = [int(g) for g in groups.split(",")]
    rows = []
    for name in ("fwd", "dkdv", "dq"):
        kernel, _, products, grid_block, kargs, extra = kernels[name]
        tune_grid = lambda m, blk=grid_block: (triton.cdiv(n, m[blk]), b * h)  # noqa: E731
        kernel[tune_grid](*kargs, CAUSAL=True, **extra, **args)
        cfg = kernel.best_config
        meta = cfg.kwargs
        grid = (triton.cdiv(n, meta[grid_block]), b * h)
        launches = {g: functools.partial(kernel.fn[grid], *kargs, CAUSAL=True, **cfg.all_kwargs(), **extra,
                                         **{**args, "HEAD_GROUP": g})
                    for g in sizes}
        times: dict[int, list[float]] = {g: [] for g in sizes}
        for r in range(rounds):
            for g in (sizes if r % 2 == 0 else sizes[::-1]):
                times[g].append(do_bench(launches[g], warmup=25, rep=100, return_mode="median"))
        tile = f"{meta['BLOCK_M']}x{meta['BLOCK_N']} w{cfg.num_warps} s{cfg.num_stages}"
        for g in sizes:
            ms = statistics.median(times[g])
            rows.append({"shape": f"B{b} H{h} N{n} d{d}", "kernel": name, "tile": tile, "head_group": g,
                         "ms": round(ms, 4), "min_ms": round(min(times[g]), 4),
                         "max_ms": round(max(times[g]), 4),
                         "tflops": round(products * product / ms / 1e9, 1)})
            print(rows[-1], flush=True)
    if out:
        write_csv(rows, out)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:5]), *sys.argv[5:6], *(int(a) for a in sys.argv[6:7]), *sys.argv[7:8])
