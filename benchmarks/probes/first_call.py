"""Time to first use of trainperf's autotuned Triton kernels.

For each case, with empty caches (Triton's compiled kernels and trainperf's tuning choices): the
first forward and the first backward in a new process ("cold"); then the same case in another
new process with both caches kept ("new process"). Every measurement is a process of its own, so
nothing tuned or compiled in memory carries over. Cases: triton-fa2 at new shapes in bf16, fp16
and fp32 (the fp32 one is the CS336 assignment tests' shape), and the chunked loss, whose
cross-entropy kernel tunes per vocabulary.

    python3 benchmarks/probes/first_call.py OUT.csv
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time

CASES = {  # name: (kind, shape, dtype)
    "fa2 bf16 1x16x4096x64": ("attention", (1, 16, 4096, 64), "bfloat16"),
    "fa2 fp16 1x16x4096x64": ("attention", (1, 16, 4096, 64), "float16"),
    "fa2 bf16 1x8x4096x128": ("attention", (1, 8, 4096, 128), "bfloat16"),
    "fa2 bf16 1x16x16384x64": ("attention", (1, 16, 16384, 64), "bfloat16"),
    "fa2 fp32 4x1x128x64": ("attention", (4, 1, 128, 64), "float32"),
    "chunked loss bf16 16384x2048, vocab 128256": ("loss", (16384, 2048, 128256), "bfloat16"),
}
LIMIT_S = 240  # a cold case still running after this is recorded as such


def child(kind: str, shape: list[int], dtype_name: str) -> None:
    """One process: the first forward, then the first backward, each synchronised and timed."""
    import torch

    dtype = getattr(torch, dtype_name)
    if kind == "attention":
        from trainperf.attention.flash_triton import flash_attention_triton as fn
        inputs = [torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3)]
    else:
        from trainperf.kernels.chunked_loss import chunked_lm_loss as fn
        rows, d, vocab = shape
        inputs = [torch.randn(rows, d, device="cuda", dtype=dtype, requires_grad=True),
                  torch.randn(vocab, d, device="cuda", dtype=dtype, requires_grad=True) * 0.02,
                  torch.randint(0, vocab, (rows,), device="cuda")]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*inputs)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    out.float().sum().backward()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(json.dumps({"fwd_s": t1 - t0, "bwd_s": t2 - t1}))


def measure(case: str, env: dict[str, str]) -> dict[str, float | str]:
    kind, shape, dtype = CASES[case]
    cmd = [sys.executable, __file__, "--child", kind, json.dumps(shape), dtype]
    try:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        return {"status": f"still running after {LIMIT_S} s"}
    if res.returncode != 0:
        return {"status": "error: " + res.stderr.strip().splitlines()[-1][:200]}
    times = json.loads(res.stdout.strip().splitlines()[-1])
    return {"status": "ok", **times, "total_s": times["fwd_s"] + times["bwd_s"]}


def main(out_csv: str) -> None:
    rows = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as caches:
            env = {**os.environ, "TRITON_CACHE_DIR": f"{caches}/triton",
                   "TRAINPERF_CACHE_DIR": f"{caches}/tp"}
            env.pop("TRAINPERF_TRITON_TUNE", None)
            for run in ("cold", "new process"):
                row = {"case": case, "run": run, **measure(case, env)}
                rows.append(row)
                print(row, flush=True)
    fields = ["case", "run", "status", "fwd_s", "bwd_s", "total_s"]
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"\n{'case':45} {'run':12} {'fwd s':>7} {'bwd s':>7} {'total s':>8}")
    for r in rows:
        t = [f"{r[k]:7.2f}" if k in r else "      -" for k in ("fwd_s", "bwd_s", "total_s")]
        note = "" if r["status"] == "ok" else r["status"]
        print(f"{r['case']:45} {r['run']:12} {t[0]} {t[1]} {t[2]:>8}  {note}")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])
    else:
        main(sys.argv[1])
