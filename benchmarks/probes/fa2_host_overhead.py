"""How much of a small triton-fa2 call is host time (Python, autotuner dispatch, launches)?

For each shape: GPU time of one forward + backward (CUDA events around many calls, synchronised
once), host time per call (wall clock without synchronising, so the CPU's share alone), and the
same with the TMA path off, to see what the descriptor set-up costs on the host.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa2_host_overhead.py
"""

from __future__ import annotations

import time
from unittest import mock

import torch

from trainperf.attention import flash_triton as ft


def per_call_ms(b: int, h: int, n: int, d: int, calls: int = 200) -> tuple[float, float]:
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)

    def step() -> None:
        ft.flash_attention_triton(q, k, v, causal=True).backward(dout)

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        step()
    end.record()
    host = (time.perf_counter() - t0) * 1e3 / calls
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls, host


def main() -> None:
    for shape in [(1, 16, 1024, 64), (8, 16, 2048, 64), (1, 16, 16384, 64)]:
        gpu, host = per_call_ms(*shape)
        with mock.patch.object(ft, "_use_tma", return_value=False):
            gpu_off, host_off = per_call_ms(*shape)
        print(f"B{shape[0]} H{shape[1]} N{shape[2]} d{shape[3]}: per call {gpu:.3f} ms on the stream, "
              f"{host:.3f} ms on the host; TMA off: {gpu_off:.3f} / {host_off:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
