"""Where a step's memory goes: per-phase peaks, the largest allocations by module, a timeline.

The profiler's memory events (CPU and GPU alike) give the timeline and the allocations; each
allocation is attributed to the innermost module range open on its thread when it happened.
On a GPU the caching allocator adds exact per-phase peaks (allocated and reserved) and a
snapshot that loads in PyTorch's memory_viz (https://pytorch.org/memory_viz).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from trainperf.core import plots
from trainperf.profiling.ranges import PHASE_RANGES, module_ranges, phase_range

GB = 2**30


@dataclass
class MemoryReport:
    phases: pd.DataFrame  # phase, peak_allocated_gb, peak_reserved_gb (GPU), start/end allocated
    largest: pd.DataFrame  # bytes, gb, module range, op time
    timeline: pd.DataFrame  # t_ms, allocated_gb
    phase_spans: pd.DataFrame = field(default_factory=pd.DataFrame)  # phase, start_ms, end_ms
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


class _PhasePeaks:
    """A phase factory that opens the profiler range and, on a GPU, reads the allocator's peaks."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.rows: list[dict] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        with phase_range(name):
            yield
        if self.cuda:
            torch.cuda.synchronize()
            self.rows.append({"phase": PHASE_RANGES.get(name, name), "start_allocated_gb": start / GB,
                              "end_allocated_gb": torch.cuda.memory_allocated() / GB,
                              "peak_allocated_gb": torch.cuda.max_memory_allocated() / GB,
                              "peak_reserved_gb": torch.cuda.max_memory_reserved() / GB})


def memory_profile(step: Callable[..., object], model: nn.Module, device: torch.device, out: Path,
                   name: str, until: str | None = None, top: int = 15,
                   blocks: str | None = None) -> MemoryReport:
    """Profile one step (after one warm-up step, so optimizer state exists) and write files."""
    step()
    out.mkdir(parents=True, exist_ok=True)
    cuda = device.type == "cuda"
    peaks = _PhasePeaks(device)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=300_000)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with module_ranges(model, blocks=blocks), profile(activities=activities, profile_memory=True) as prof:
        with phase_range("step"):
            step(peaks, until=until) if until else step(peaks)
        if cuda:
            torch.cuda.synchronize()
    files = []
    if cuda:
        snap = out / f"memory_{name}_snapshot.pickle"
        torch.cuda.memory._dump_snapshot(str(snap))
        torch.cuda.memory._record_memory_history(enabled=None)
        files.append(snap)
    trace = Path(tempfile.mkstemp(suffix=".json")[1])
    prof.export_chrome_trace(str(trace))
    try:
        events = json.loads(trace.read_text())["traceEvents"]
    finally:
        trace.unlink(missing_ok=True)
    report = _from_events(events, device_type=1 if cuda else 0, top=top)
    if cuda:
        report.phases = pd.DataFrame(peaks.rows)
    else:
        report.notes.append("CPU: no caching-allocator snapshot and no reserved memory; peaks are the "
                            "profiler's 'Total Allocated' of the CPU allocator within each phase")
    report.files = files
    if plots.available():
        png = out / f"memory_{name}_timeline.png"
        plot_timeline(report, png, title=f"memory timeline: {name}")
        report.files.append(png)
    else:
        report.notes.append(plots.NO_PLOTS)
    return report


def _from_events(events: list[dict], device_type: int, top: int) -> MemoryReport:
    mem = [e for e in events if e.get("name") == "[memory]"
           and e.get("args", {}).get("Device Type") == device_type]
    ranges = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    if not mem:
        return MemoryReport(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                            notes=["the profiler saw no memory events"])
    t0 = min(e["ts"] for e in mem)
    timeline = pd.DataFrame({"t_ms": [(e["ts"] - t0) / 1e3 for e in mem],
                             "allocated_gb": [e["args"]["Total Allocated"] / GB for e in mem]})
    phases = []
    for r in ranges:
        if r["name"] in PHASE_RANGES.values():
            inside = [e["args"]["Total Allocated"] for e in mem if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]]
            if inside:
                phases.append({"phase": r["name"], "peak_allocated_gb": max(inside) / GB,
                               "start_ms": (r["ts"] - t0) / 1e3, "end_ms": (r["ts"] + r["dur"] - t0) / 1e3})
    allocs = sorted((e for e in mem if e["args"]["Bytes"] > 0), key=lambda e: -e["args"]["Bytes"])[:top]
    largest = pd.DataFrame([{"gb": e["args"]["Bytes"] / GB, "module": _innermost(ranges, e),
                             "t_ms": (e["ts"] - t0) / 1e3} for e in allocs])
    spans = pd.DataFrame(phases)
    return MemoryReport(spans.drop(columns=["start_ms", "end_ms"], errors="ignore"), largest, timeline, spans)


def _innermost(ranges: list[dict], event: dict) -> str:
    """The shortest range containing the event: on its thread, or a phase range on any thread
    (autograd allocates backward memory on its own worker thread)."""
    best = None
    for r in ranges:
        visible = r["tid"] == event["tid"] or r["name"] in PHASE_RANGES.values()
        inside = r["ts"] <= event["ts"] <= r["ts"] + r["dur"]
        if visible and inside and (best is None or r["dur"] < best["dur"]):
            best = r
    return best["name"] if best else "(outside any range)"


def plot_timeline(report: MemoryReport, path: Path, title: str) -> None:
    from trainperf.core.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    if not report.timeline.empty:
        ax.step(report.timeline.t_ms, report.timeline.allocated_gb, where="post", linewidth=1.2)
    spans = report.phase_spans
    for i, row in enumerate(spans.itertuples()):
        if row.phase != "step":
            ax.axvspan(row.start_ms, row.end_ms, alpha=0.12, color=f"C{i + 1}", label=row.phase)
    ax.set_xlabel("time in the step (ms)")
    ax.set_ylabel("allocated (GiB)")
    ax.set_title(title)
    if not spans.empty:
        ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
