"""Profile a workload's step with module ranges, save the breakdown, compare two breakdowns."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from trainperf.core.timing import start_measured_window
from trainperf.profiling.breakdown import Breakdown, breakdown
from trainperf.profiling.ranges import module_ranges, phase_range
from trainperf.profiling.torch_prof import profile_steps

StepFn = Callable[[Callable[[str], Any]], object]  # a step that takes a phase-context factory


def profile_workload(step: StepFn, model: nn.Module | None, device: torch.device, steps: int = 1,
                     warmup: int = 2, ranges_only: bool = False,
                     blocks: str | None = None) -> Breakdown | None:
    """Warm up, then run `steps` steps with module + phase ranges under torch.profiler (`blocks`:
    the path of the model's repeated blocks, named `layer` in the ranges).

    With `ranges_only` the steps run with NVTX ranges but no profiler (for `nsys profile`).
    """
    for _ in range(warmup):
        step(phase_range)
    start_measured_window(device)
    ctx = module_ranges(model, blocks=blocks) if model is not None else nullcontext([])
    with ctx:
        if ranges_only:
            for _ in range(steps):
                with phase_range("step"):
                    step(phase_range)
            start_measured_window(device)
            return None
        trace = profile_steps(lambda: step(phase_range), device, steps)
    return breakdown(trace)


def save_breakdown(bd: Breakdown, path: Path, meta: dict[str, Any]) -> list[Path]:
    """<path>.json (everything) plus <path>_ranges.csv and <path>_kernels.csv."""
    path.parent.mkdir(parents=True, exist_ok=True)
    json_path = path.with_suffix(".json")
    json_path.write_text(json.dumps({"meta": meta, **bd.to_dict()}, indent=1, default=str))
    ranges_csv = path.parent / f"{path.name}_ranges.csv"
    kernels_csv = path.parent / f"{path.name}_kernels.csv"
    bd.ranges.to_csv(ranges_csv, index=False)
    bd.kernels.to_csv(kernels_csv, index=False)
    return [json_path, ranges_csv, kernels_csv]


def load_breakdown(path: Path) -> tuple[Breakdown, dict[str, Any]]:
    if not path.is_file():
        raise ValueError(f"{path}: {'a folder, not a file' if path.is_dir() else 'no such file'}")
    try:
        data = json.loads(path.read_text())
        return Breakdown.from_dict(data), data.get("meta", {})
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a breakdown written by `trainperf profile` ({exc})") from None


def compare_breakdowns(a: Breakdown, b: Breakdown) -> pd.DataFrame:
    """range | calls | A kernels | A ms | B kernels | B ms | speed-up (A time / B time)."""
    cols = ["range", "calls", "kernels", "kernel_ms"]
    t = a.ranges[cols].merge(b.ranges[cols], on="range", how="outer", suffixes=(" A", " B"))
    t["calls"] = t.pop("calls A").fillna(t.pop("calls B"))
    t = t.rename(columns={"kernels A": "A kernels", "kernel_ms A": "A ms",
                          "kernels B": "B kernels", "kernel_ms B": "B ms"})
    t["speed-up"] = t["A ms"] / t["B ms"]
    return t[["range", "calls", "A kernels", "A ms", "B kernels", "B ms", "speed-up"]].sort_values("range")
