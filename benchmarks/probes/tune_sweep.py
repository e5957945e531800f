"""Every autotuning candidate's time at many shapes: which candidates ever win, and by how much.

For each shape, one forward + backward of triton-fa2 tunes its three kernels (the disk cache
off, so every shape tunes); the autotuner's timing of each candidate (`configs_timings`, median
ms) is written as one CSV row per (shape, kernel, candidate), with its time over the best.

    python3 benchmarks/probes/tune_sweep.py OUT.csv
"""

from __future__ import annotations

import csv
import os
import sys

os.environ["TRAINPERF_AUTOTUNE_CACHE"] = "0"
import torch  # noqa: E402

from trainperf.attention import flash_triton as ft  # noqa: E402

SHAPES = [  # B, H, N, D, causal
    (1, 16, 16384, 64, True), (1, 16, 4096, 64, True), (8, 16, 2048, 64, True), (4, 16, 1024, 64, True),
    (12, 32, 1024, 64, True), (1, 32, 16384, 64, True), (1, 16, 4096, 64, False), (8, 16, 2048, 64, False),
    (1, 8, 16384, 128, True), (1, 8, 4096, 128, True), (8, 16, 2048, 128, True), (8, 16, 4096, 128, True),
    (4, 32, 1024, 128, True), (1, 8, 4096, 128, False),
]
KERNELS = {"fwd": ft._fwd_kernel, "dq": ft._bwd_dq_kernel, "dkdv": ft._bwd_dkdv_kernel}


def main(out: str) -> None:
    rows = []
    for b, h, n, d, causal in SHAPES:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        ft.flash_attention_triton(q, k, v, causal=causal).sum().backward()
        torch.cuda.synchronize()
        for name, kernel in KERNELS.items():
            timings = {str(c): t[0] if isinstance(t, list) else t for c, t in kernel.configs_timings.items()}
            best = min(timings.values())
            for config, t in timings.items():
                rows.append({"shape": f"{b}x{h}x{n}x{d}{'' if causal else ' full'}", "kernel": name,
                             "config": config.replace(", num_ctas: 1", "").replace(", maxnreg: None", ""),
                             "ms": round(t, 4), "over_best": round(t / best, 4)})
        print(f"{b}x{h}x{n}x{d} causal={causal}: tuned", flush=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    worst = {}
    for r in rows:
        key = (r["kernel"], r["config"])
        worst[key] = min(worst.get(key, float("inf")), r["over_best"])
    print("\nbest showing of each candidate (1.0 = won somewhere)")
    for (kernel, config), x in sorted(worst.items()):
        print(f"{kernel:5} {x:6.3f}  {config}")


if __name__ == "__main__":
    main(sys.argv[1])
