"""Probe: the GPU's energy over windows of 0.1 to 3 s, from NVML's energy counter (GpuMonitor's
energy_j) against the window's median power times its length. usage: python3 energy-probe.py"""

import time

import torch

from trainperf.core.gpu_monitor import GpuMonitor

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(50):  # warm: clocks and power settle under load
    a @ a
torch.cuda.synchronize()
for seconds in (0.1, 0.3, 1.0, 3.0):
    with GpuMonitor(torch.device("cuda")) as gpu:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(10):
                a @ a
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    m = gpu.metrics()
    print(f"window {elapsed:.3f} s: counter {m.get('energy_j', float('nan')):.1f} J, median power x time "
          f"{m['power_w'] * elapsed:.1f} J ({m['power_w']} W, {m['sm_clock_mhz']} MHz)", flush=True)
