"""Probe: under the power cap, which GEMM kernel does the most work per joule? Every Hopper tile
configuration quack's autotuner chooses from (swap_ab off), cuBLAS, and the configuration quack's
autotuner picks, on the MLP's down projection at 24 x 768 tokens (x [18432, 8192] times the
weight [2048, 8192] transposed). usage: python3 gemm-energy.py DEADLINE_EPOCH

The GPU is first held at its power cap by a second of cuBLAS GEMMs. Then, in two alternating
rounds, each kernel runs back to back for about 0.4 s: CUDA-event time per call, NVML's energy
per call (GpuMonitor), TFLOP/s, and the median SM clock and power. Under the cap a kernel's
sustained time follows its energy per call; the autotuner times each candidate for 25 ms.
"""

import sys
import time

import torch

from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.kernels.quack_mlp import _load_quack

M, K, N = 18432, 8192, 2048
WINDOW_S = 0.4


def sustained(fn, calls: int) -> dict:  # noqa: ANN001
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with GpuMonitor(torch.device("cuda")) as monitor:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
    m = monitor.metrics()
    ms = start.elapsed_time(end) / calls
    return {"ms": ms, "mj": m.get("energy_j", float("nan")) / calls * 1e3, "tflops": 2 * M * N * K / ms / 1e9,
            "mhz": m.get("sm_clock_mhz"), "w": m.get("power_w")}


def main() -> None:
    deadline = float(sys.argv[1])
    _load_quack()
    from quack.gemm_config import _get_sm90_configs
    from quack.gemm_interface import gemm, gemm_tuned

    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ref = x @ w.t()
    kernels = {"cublas": lambda: torch.mm(x, w.t(), out=out)}
    gemm(x, w.t(), tuned=True)  # the autotuner's pick, cached by key
    picked = [str(c) for c in gemm_tuned.cache.values()]
    print(f"quack autotuner picked: {picked}", flush=True)
    kernels["quack-tuned"] = lambda: gemm(x, w.t(), out=out, tuned=True)
    for cfg in _get_sm90_configs():
        if cfg.swap_ab or time.time() > deadline - 200:
            continue
        name = (f"{cfg.tile_m}x{cfg.tile_n} {'pingpong' if cfg.pingpong else 'coop'} "
                f"cluster {cfg.cluster_m}x{cfg.cluster_n}")
        try:
            t0 = time.time()
            gemm_tuned.fn(x, w.t(), out, config=cfg)
            torch.cuda.synchronize()
            err = float((out.float() - ref.float()).abs().max())
            print(f"  compiled {name} in {time.time() - t0:.1f} s, max diff from cuBLAS {err:.2e}",
                  flush=True)
            kernels[name] = lambda cfg=cfg: gemm_tuned.fn(x, w.t(), out, config=cfg)
        except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
            print(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    heat = time.time()
    while time.time() - heat < 1.0:
        for _ in range(20):
            kernels["cublas"]()
        torch.cuda.synchronize()
    results: dict[str, list[dict]] = {name: [] for name in kernels}
    for rnd in range(2):
        for name, fn in kernels.items():
            if time.time() > deadline:
                break
            calls = max(20, int(WINDOW_S / 0.9e-3))
            r = sustained(fn, calls)
            results[name].append(r)
            print(f"round {rnd} {name:34s}: {r['ms']:.3f} ms, {r['mj']:.1f} mJ/call, "
                  f"{r['tflops']:.0f} TFLOP/s, {r['mhz']} MHz, {r['w']} W", flush=True)
    print("by energy per call (mean of the rounds):", flush=True)
    means = {n: (sum(r["mj"] for r in rs) / len(rs), sum(r["ms"] for r in rs) / len(rs))
             for n, rs in results.items() if rs}
    for name, (mj, ms) in sorted(means.items(), key=lambda kv: kv[1][0]):
        print(f"  {name:34s}: {mj:.1f} mJ/call, {ms:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
