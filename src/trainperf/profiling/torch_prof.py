"""Per-range breakdown from torch.profiler: profile a step, read its trace into a `Trace`.

On a GPU the kernels are CUDA kernels (plus memcpy/memset) joined to their runtime launch calls
by correlation id. On the CPU there are no kernels, so each CPU op stands in for one with its self
time (what it spends outside the ops it calls): the same table, a CPU picture.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from trainperf.profiling.breakdown import KERNEL_COLUMNS, LAUNCH_COLUMNS, RANGE_COLUMNS, Trace
from trainperf.profiling.ranges import phase_range

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}


def profile_steps(step: Callable[[], object], device: torch.device, steps: int = 1,
                  trace_path: Path | None = None, before: Callable[[], object] | None = None) -> Trace:
    """Run `steps` calls of `step` (each inside a `step` range) under the profiler, after `before`."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        if before is not None:
            before()
        for _ in range(steps):
            with phase_range("step"):
                step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    path = trace_path or Path(tempfile.mkstemp(suffix=".json")[1])
    prof.export_chrome_trace(str(path))
    try:
        return read_chrome_trace(path, gpu=device.type == "cuda")
    finally:
        if trace_path is None:
            path.unlink(missing_ok=True)


def read_chrome_trace(path: Path, gpu: bool) -> Trace:
    """The three tables of a torch.profiler chrome trace."""
    events = [e for e in json.loads(Path(path).read_text())["traceEvents"] if e.get("ph") == "X"]
    ranges = pd.DataFrame([(e["name"], e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events
                           if e.get("cat") == "user_annotation"], columns=RANGE_COLUMNS)
    if gpu:
        launches = pd.DataFrame([(e["args"]["correlation"], e["ts"], e["tid"]) for e in events
                                 if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})],
                                columns=LAUNCH_COLUMNS)
        kernels = pd.DataFrame([(e["args"].get("correlation"), e["name"], e["ts"], e["ts"] + e["dur"])
                                for e in events if e.get("cat") in DEVICE_CATEGORIES], columns=KERNEL_COLUMNS)
    else:
        ops = _self_times([e for e in events if e.get("cat") == "cpu_op"])
        launches = pd.DataFrame([(i, e["ts"], e["tid"]) for i, (e, _) in enumerate(ops)],
                                columns=LAUNCH_COLUMNS)
        kernels = pd.DataFrame([(i, e["name"], e["ts"], e["ts"] + own) for i, (e, own) in enumerate(ops)],
                               columns=KERNEL_COLUMNS)
    return Trace(ranges, launches, kernels)


def _self_times(ops: list[dict]) -> list[tuple[dict, float]]:
    """Each CPU op with its self time (its duration less that of the ops it calls on its thread),
    where that is above zero: so the op doing the work counts, not the small ops it calls."""
    out = []
    by_thread: dict[object, list[dict]] = {}
    for e in ops:
        by_thread.setdefault(e["tid"], []).append(e)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        own = {id(e): float(e["dur"]) for e in thread_ops}
        stack: list[dict] = []
        for e in thread_ops:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            if stack:
                own[id(stack[-1])] -= e["dur"]  # a direct child's time is not its parent's own
            stack.append(e)
        out += [(e, own[id(e)]) for e in thread_ops if own[id(e)] > 0]
    return out
