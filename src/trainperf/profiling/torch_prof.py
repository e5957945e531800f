"""Per-range breakdown from torch.profiler: profile a step, read its trace into a `Trace`.

On a GPU the kernels are CUDA kernels (plus memcpy/memset) joined to their runtime launch calls
by correlation id. On the CPU there are no kernels, so the leaf CPU ops stand in for them (each
its own launch): the same table, with CPU time instead of GPU time.
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
from trainperf.profiling.ranges import PHASE_RANGES, phase_range

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}
PHASES = set(PHASE_RANGES.values())


def profile_steps(step: Callable[[], object], device: torch.device, steps: int = 1,
                  trace_path: Path | None = None) -> Trace:
    """Run `steps` calls of `step` (each inside a `step` range) under the profiler."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
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
    ranges = pd.DataFrame(
        [(e["name"], e["ts"], e["ts"] + e["dur"], None if e["name"] in PHASES else e["tid"])
         for e in events if e.get("cat") == "user_annotation"], columns=RANGE_COLUMNS)
    if gpu:
        launches = pd.DataFrame([(e["args"]["correlation"], e["ts"], e["tid"]) for e in events
                                 if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})],
                                columns=LAUNCH_COLUMNS)
        kernels = pd.DataFrame([(e["args"].get("correlation"), e["name"], e["ts"], e["ts"] + e["dur"])
                                for e in events if e.get("cat") in DEVICE_CATEGORIES], columns=KERNEL_COLUMNS)
    else:
        leaves = _leaf_ops([e for e in events if e.get("cat") == "cpu_op"])
        launches = pd.DataFrame([(i, e["ts"], e["tid"]) for i, e in enumerate(leaves)],
                                columns=LAUNCH_COLUMNS)
        kernels = pd.DataFrame([(i, e["name"], e["ts"], e["ts"] + e["dur"]) for i, e in enumerate(leaves)],
                               columns=KERNEL_COLUMNS)
    return Trace(ranges, launches, kernels)


def _leaf_ops(ops: list[dict]) -> list[dict]:
    """CPU ops that enclose no other op on their thread (so nested aten calls count once)."""
    leaves = []
    by_thread: dict[object, list[dict]] = {}
    for e in ops:
        by_thread.setdefault(e["tid"], []).append(e)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        for i, e in enumerate(thread_ops):
            nxt = thread_ops[i + 1] if i + 1 < len(thread_ops) else None
            if nxt is None or nxt["ts"] >= e["ts"] + e["dur"]:
                leaves.append(e)
    return leaves
