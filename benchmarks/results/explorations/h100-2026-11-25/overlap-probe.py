"""Probe: under the power cap, does memory-bound work on a second stream hide behind GEMMs?

At 24 x 768 `fast` spends about 21 ms per iteration in memory-bound kernels (norms, RoPE, adds,
attention pre/post-processing, SGD) beside 194 ms of GEMMs at the 700 W cap. If those kernels ran
beside the weight-gradient GEMMs instead of between them, would the step save their time, or only
trade it for lower clocks? usage: python3 overlap-probe.py DEADLINE_EPOCH

The work: the MLP's down-projection GEMM at 18,432 tokens (x [18432, 8192] times [2048, 8192]
transposed) and, per GEMM, MEM_PER_GEMM elementwise adds of two [18432, 2048] bf16 tensors
(about the bytes of an RMSNorm backward). Modes, each for about 0.4 s after a second of GEMMs at
the cap, in three alternating rounds: the GEMMs alone, the adds alone, both on one stream (as the
step runs them now) and both on two streams without dependencies between them. Also the same with
a small GEMM (the K/V projections' weight gradient, [512, 18432] x [18432, 2048]) in the adds'
place, for the inefficient GEMMs of the step.
"""

import sys
import time

import torch

from trainperf.core.gpu_monitor import GpuMonitor

T, FFN, D, KV = 18432, 8192, 2048, 512
MEM_PER_GEMM = 2
ITERS = 400


def main() -> None:
    deadline = float(sys.argv[1])
    torch.manual_seed(0)
    dev = torch.device("cuda")
    x = torch.randn(T, FFN, device=dev, dtype=torch.bfloat16)
    w = torch.randn(D, FFN, device=dev, dtype=torch.bfloat16) * 0.02
    out = torch.empty(T, D, device=dev, dtype=torch.bfloat16)
    a, b, c = (torch.randn(T, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    dy = torch.randn(T, KV, device=dev, dtype=torch.bfloat16)
    h = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
    dw = torch.empty(KV, D, device=dev, dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def gemm() -> None:
        torch.mm(x, w.t(), out=out)

    def mem() -> None:
        for _ in range(MEM_PER_GEMM):
            torch.add(a, b, out=c)

    def small() -> None:
        for _ in range(MEM_PER_GEMM):
            torch.mm(dy.t(), h, out=dw)

    def one_stream(second):  # noqa: ANN001, ANN202
        def run() -> None:
            for _ in range(ITERS):
                gemm()
                second()
        return run

    def two_streams(second):  # noqa: ANN001, ANN202
        def run() -> None:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(ITERS):
                    second()
            for _ in range(ITERS):
                gemm()
            torch.cuda.current_stream().wait_stream(side)
        return run

    def alone(fn):  # noqa: ANN001, ANN202
        def run() -> None:
            for _ in range(ITERS):
                fn()
        return run

    modes = {
        "gemm alone": alone(gemm),
        "adds alone": alone(mem),
        "gemm+adds one stream": one_stream(mem),
        "gemm+adds two streams": two_streams(mem),
        "small gemms alone": alone(small),
        "gemm+small one stream": one_stream(small),
        "gemm+small two streams": two_streams(small),
    }
    for fn in modes.values():
        fn()
    torch.cuda.synchronize()
    heat = time.time()
    while time.time() - heat < 1.0:
        modes["gemm alone"]()
        torch.cuda.synchronize()
    results: dict[str, list[float]] = {name: [] for name in modes}
    for rnd in range(3):
        for name, fn in modes.items():
            if time.time() > deadline:
                break
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with GpuMonitor(dev) as monitor:
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
            m = monitor.metrics()
            ms = start.elapsed_time(end) / ITERS
            results[name].append(ms)
            print(f"round {rnd} {name:24s}: {ms * 1e3:7.1f} us per GEMM, "
                  f"{m.get('sm_clock_mhz')} MHz, {m.get('power_w')} W", flush=True)
    best = {n: min(v) for n, v in results.items() if v}
    print("best of the rounds, us per GEMM:", flush=True)
    for name, ms in best.items():
        print(f"  {name:24s}: {ms * 1e3:7.1f}", flush=True)
    for kind in ("adds", "small"):
        alone_ms = best.get(f"{kind} alone" if kind == "adds" else "small gemms alone")
        serial, overlap = best.get(f"gemm+{kind} one stream"), best.get(f"gemm+{kind} two streams")
        if alone_ms and serial and overlap:
            print(f"{kind}: two streams save {(serial - overlap) * 1e3:.1f} us per GEMM of the "
                  f"{alone_ms * 1e3:.1f} us the {kind} take alone "
                  f"({(serial - overlap) / alone_ms:.0%})", flush=True)


if __name__ == "__main__":
    main()
