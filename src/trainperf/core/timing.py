"""Per-phase timers: CUDA events on the GPU, perf_counter on the CPU, host enqueue time on both.

The host time of a GPU phase is how long the CPU took to *launch* it. When that is close to the
GPU time, the GPU was waiting for launches: the phase is launch-bound.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

LAUNCH_BOUND_RATIO = 0.9  # host enqueue time / GPU time above which a phase is launch-bound


class PhaseTimer:
    """Collects one duration (ms) per phase per step; device work is timed with CUDA events."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = defaultdict(list)
        self._host_ms: dict[str, list[float]] = defaultdict(list)
        self._cpu_ms: dict[str, list[float]] = defaultdict(list)
        self.enabled = True

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the enclosed block as one sample of phase `name` (no-op while disabled)."""
        if not self.enabled:
            yield
            return
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        yield
        host_ms = (time.perf_counter() - t0) * 1e3
        if self.cuda:
            end.record()
            self._events[name].append((start, end))
            self._host_ms[name].append(host_ms)
        else:
            self._cpu_ms[name].append(host_ms)

    def samples(self) -> dict[str, list[float]]:
        """Milliseconds per phase; synchronises the device first so events are complete."""
        if not self.cuda:
            return dict(self._cpu_ms)
        torch.cuda.synchronize()
        return {k: [s.elapsed_time(e) for s, e in v] for k, v in self._events.items()}

    def host_samples(self) -> dict[str, list[float]]:
        """Host (launch) milliseconds per phase; equal to samples() on the CPU."""
        return dict(self._host_ms) if self.cuda else dict(self._cpu_ms)


def start_measured_window(device: torch.device) -> None:
    """Start a measured window clean: queue drained, peak-memory counter reset (GPU only)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def time_op(fn: Callable[[], object], device: torch.device, warmup: int, reps: int) -> list[float]:
    """Milliseconds of `reps` calls of `fn` after `warmup` calls (CUDA events on the GPU)."""
    for _ in range(warmup):
        fn()
    timer = PhaseTimer(device)
    start_measured_window(device)
    for _ in range(reps):
        with timer.phase("op"):
            fn()
    return timer.samples()["op"]


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on `device` (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kernel_and_host_ms(fn: Callable[[], object], device: torch.device,
                       calls: int = 10) -> tuple[float, float]:
    """Per call of `fn` on a GPU: the summed duration of its kernels (from the profiler) and the
    host's time to launch it (without waiting). Where host ≥ kernels, a timer around the call
    measures the launches, not the GPU: a short kernel is then judged by its kernel time."""
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) * 1e3 / calls
    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        synchronize(device)
    kernels = sum(e.self_device_time_total for e in prof.key_averages()) / 1e3 / calls
    return kernels, host
