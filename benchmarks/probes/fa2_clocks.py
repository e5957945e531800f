"""SM clock and power while triton-fa2 and cuDNN run back to back at one shape, sustained.

Under the H100's power limit the clock falls with the energy a kernel burns, so a kernel that
does more matrix products (triton-fa2's backward: 7 against cuDNN's 5) may lose time to the
clock rather than to cycles. Each implementation runs `calls` forward + backward calls in a
row, in alternating rounds, while a thread reads NVML every 10 ms: the SM clock, the power
draw and whether the power cap was holding the clock. Printed per implementation: time per
call, median clock and power, the share of samples under the power cap, and kilocycles per call
(time × clock), which compares the two at equal clocks.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa2_clocks.py B H N D [rounds [calls]]
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import pynvml
import torch

from trainperf.attention.registry import get_attention

POWER_CAP = pynvml.nvmlClocksThrottleReasonSwPowerCap


def sampled(fn, calls: int, handle) -> dict[str, float]:  # noqa: ANN001
    """Run fn `calls` times; NVML samples taken meanwhile, and the time per call."""
    samples: list[tuple[int, float, bool]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                            bool(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) & POWER_CAP)))
            time.sleep(0.01)

    torch.cuda.synchronize()
    thread = threading.Thread(target=sample)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    thread.start()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    done.set()
    thread.join()
    ms = start.elapsed_time(end) / calls
    clock = statistics.median(s[0] for s in samples)
    return {"ms": ms, "mhz": clock, "watts": statistics.median(s[1] for s in samples),
            "capped": sum(s[2] for s in samples) / len(samples), "kcycles": ms * clock}


def main(b: int, h: int, n: int, d: int, rounds: int = 4, calls: int = 200) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)
    ops = {}
    for name in ("sdpa-cudnn", "triton-fa2"):
        fn = get_attention(name, torch.device("cuda"))
        ops[name] = lambda fn=fn: torch.autograd.grad(fn(q, k, v, causal=True), (q, k, v), dout)
        for _ in range(5):
            ops[name]()
    for r in range(rounds):
        for name in (list(ops) if r % 2 == 0 else list(ops)[::-1]):
            s = sampled(ops[name], calls, handle)
            print(f"B{b} H{h} N{n} d{d} round {r} {name}: {s['ms']:.3f} ms per call, SM {s['mhz']:.0f} MHz, "
                  f"{s['watts']:.0f} W, power-capped {100 * s['capped']:.0f}% of samples, "
                  f"{s['kcycles']:.0f} kcycles per call", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:7]))
