"""The GPU's clocks and power across a measured window, sampled through NVML from a thread.

One clock reading taken after a measurement can miss what happened during it. Under its power
limit an H100's SM clock follows the energy the kernels burn: two attention kernels of
about equal cycle counts ran at 1545-1575 MHz (triton-fa2) and 1665-1710 MHz (cuDNN), so their
times differed by the clock. The workloads therefore report the window's median clocks and
power, the share of samples in which the power cap held the clock down, and every other reason
NVML gave for a clock below its maximum (thermal, a hardware slowdown, the power brake,
application clocks), each with its share: a clock held down with the power cap flag unset has a
cause there. Power is NVML's
instantaneous reading where the driver has one: its default reading is a one-second average,
which lags a window of a fraction of a second (it read 246 W for a case that sat at the 700 W
cap in the instantaneous readings).

Under the cap, time follows energy, so the window's energy is reported too: the difference of
NVML's energy counter (millijoules since the driver loaded) between the window's ends. It is
exact over a window of seconds, where a median power times a mean time is an estimate.

A time is the step's alone only where nothing else ran on the GPU: a second process training on it
halves the step's speed and leaves no other trace in the numbers. At the window's ends the monitor
lists the processes NVML sees on the GPU, and names those not of this trainperf run
(`gpu_shared_with`; `own_processes`). Where NVML counts processes in another PID namespace (a container),
which of them is this one cannot be told, and nothing is named.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

SAMPLE_S = 0.01  # NVML updates clocks and power about this often
POWER_CAP_REASON = 0x4  # nvmlClocksEventReasonSwPowerCap (older name: ...ThrottleReason...)
# NVML's clocks-event reason bits (nvml.h, nvmlClocksEventReason*), named as the report shows them
CLOCK_REASONS = {0x1: "idle", 0x2: "application clocks", POWER_CAP_REASON: "power cap",
                 0x8: "hardware slowdown", 0x10: "sync boost", 0x20: "software thermal",
                 0x40: "hardware thermal", 0x80: "power brake", 0x100: "display clock"}
# Reasons that disturb a measurement: heat or the hardware, not the power limit the GPU is run at
THROTTLES = 0x8 | 0x20 | 0x40 | 0x80


def nvml_module():  # noqa: ANN202 - the pynvml module, or None where it is missing
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def nvml_handle(nvml: Any, device: torch.device) -> Any:
    """NVML's handle of torch's CUDA `device`, found by the GPU's UUID: NVML counts every GPU of
    the machine, torch only those CUDA_VISIBLE_DEVICES shows, so their indexes differ wherever a
    process is given one GPU of several."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    if not uuid:  # a torch without the UUID: the indexes agree while every GPU is visible
        return nvml.nvmlDeviceGetHandleByIndex(index)
    return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")


class GpuMonitor:
    """Samples SM and memory clocks, power draw and the power-cap flag of `device` while open
    (`with GpuMonitor(device) as gpu: ...`, or start()/stop()); metrics() summarises them. Off
    the GPU, or without NVML, it samples nothing and reports nothing."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.samples: list[tuple[float, float, float, int]] = []  # SM MHz, memory MHz, W, reason bits
        self._energy_mj: list[int | None] = []  # the counter at the window's start and end
        self._nvml = nvml_module() if device.type == "cuda" else None
        self._handle: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sharers: dict[int, int | None] = {}  # pid -> bytes it held, of other processes on the GPU

    def __enter__(self) -> GpuMonitor:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Begin sampling (the first sample is taken at once)."""
        if self._nvml is None:
            return
        try:
            self._nvml.nvmlInit()
            self._handle = nvml_handle(self._nvml, self.device)
        except Exception:  # noqa: BLE001 - NVML refusing (no driver, no permission) is not an error here
            self._nvml = None
            return
        # the bindings' names and the power reading are settled once, not on every sample
        self._reasons = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        self._power_field = getattr(self._nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        self._watts = self._instant_watts if self._instant_watts() is not None else self._average_watts
        self._energy_mj = [self._energy_counter()]
        self._look_for_sharers()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="trainperf-gpu-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End sampling with one last sample, so even a window shorter than SAMPLE_S has two."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        self._energy_mj.append(self._energy_counter())
        self._look_for_sharers()
        self._nvml.nvmlShutdown()

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(SAMPLE_S):
                return

    def _instant_watts(self) -> float | None:
        """Instantaneous power, or None where the bindings or the driver lack the field."""
        if self._power_field is None:
            return None
        try:
            value = self._nvml.nvmlDeviceGetFieldValues(self._handle, [self._power_field])[0]
        except Exception:  # noqa: BLE001 - NVML refusing the field: use the average
            return None
        return value.value.uiVal / 1000 if value.nvmlReturn == 0 else None

    def _energy_counter(self) -> int | None:
        """NVML's energy counter in mJ, or None where the GPU or the driver has none."""
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception:  # noqa: BLE001 - no counter (GPUs before Volta): no energy reported
            return None

    def _look_for_sharers(self) -> None:
        """Note the processes on the GPU other than this one and those it started (module doc)."""
        try:
            listed = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception:  # noqa: BLE001 - NVML refusing the list: nothing to say
            return
        held = {p.pid: p.usedGpuMemory for p in listed}
        if len(held) < 2:  # this process alone (or one NVML names in another namespace): no /proc walk
            return
        family = own_processes()
        if held.keys() & family:  # NVML speaks this PID namespace
            self._sharers.update({pid: used for pid, used in held.items() if pid not in family})

    def _average_watts(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000

    def _sample(self) -> None:
        nvml, h = self._nvml, self._handle
        with contextlib.suppress(Exception):  # a reading NVML refuses is left out, not the measurement
            self.samples.append((nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
                                 nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
                                 self._watts(), int(self._reasons(h))))

    def metrics(self) -> dict[str, Any]:
        """Medians over the window: sm_clock_mhz, mem_clock_mhz, power_w; power_capped: the share
        of samples under the power cap; clock_reasons: every reason NVML gave, with its share of
        the samples, most frequent first ("power cap 97%, software thermal 4%"; "none" where the
        clock was never held down); clock_throttled: those of heat or the hardware alone, only
        where there were any, for the tables to flag; energy_j: the energy the GPU took over the
        window, where its counter was read at both ends. Empty when nothing was sampled."""
        if not self.samples:
            return {}
        sm, mem, watts, reasons = zip(*self.samples, strict=True)
        out = {"sm_clock_mhz": statistics.median(sm), "mem_clock_mhz": statistics.median(mem),
               "power_w": round(statistics.median(watts), 1),
               "power_capped": sum(bool(r & POWER_CAP_REASON) for r in reasons) / len(reasons),
               "clock_reasons": clock_reasons(reasons)}
        if any(r & THROTTLES for r in reasons):
            out["clock_throttled"] = clock_reasons([r & THROTTLES for r in reasons])
        if len(self._energy_mj) == 2 and None not in self._energy_mj:
            out["energy_j"] = (self._energy_mj[1] - self._energy_mj[0]) / 1e3
        if self._sharers:
            out["gpu_shared_with"] = ", ".join(
                f"pid {pid}" + (f" ({used / 2**30:.1f} GB)" if isinstance(used, int) else "")
                for pid, used in sorted(self._sharers.items()))
        return out


def own_processes() -> set[int]:
    """The processes of this trainperf run, read from /proc (this process alone elsewhere): every
    process started by its top-most trainperf ancestor (the supervisor of a launch's ranks, the
    command of parity's helpers, or this process), which is one of them. A trainperf command
    started beside this one is not."""
    parents: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):  # a process that ended meanwhile
                    stat = Path(entry.path, "stat").read_text()  # "pid (name) state ppid ..."
                    parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    top = os.getpid()
    while top in parents and _runs_trainperf(parents[top]):
        top = parents[top]
    family, grown = {top}, True
    while grown:
        children = {pid for pid, parent in parents.items() if parent in family} - family
        family |= children
        grown = bool(children)
    return family


def _runs_trainperf(pid: int) -> bool:
    try:
        return b"trainperf" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def clock_reasons(samples: tuple[int, ...] | list[int]) -> str:
    """Each reason bit set in any sample, named, with the share of samples that had it, most
    frequent first; bits NVML has not named yet show in hex."""
    shares = {}
    for bit in sorted({1 << i for r in samples for i in range(r.bit_length()) if r >> i & 1}):
        shares[CLOCK_REASONS.get(bit, hex(bit))] = sum(bool(r & bit) for r in samples) / len(samples)
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {share:.0%}" for name, share in ranked) or "none"


def monitored_calls(run: Callable[[], object], calls: int, device: torch.device) -> dict[str, Any]:
    """`calls` back-to-back calls of `run` on the GPU between two CUDA events, under a GpuMonitor:
    seconds and (where NVML's counter was read) joules per call, with the window's metrics. What
    an A/B probe under the power cap sets side by side in alternating rounds."""
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with GpuMonitor(device) as monitor:
        start.record()
        for _ in range(calls):
            run()
        end.record()
        torch.cuda.synchronize(device)
    metrics = monitor.metrics()
    return {**metrics, "s": start.elapsed_time(end) / 1e3 / calls,
            "j": metrics.get("energy_j", float("nan")) / calls}
