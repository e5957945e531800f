"""Per-range kernel breakdown from any trace: ranges, launch calls and kernels, joined.

Both torch.profiler traces and nsys SQLite exports are first turned into three tables:
  ranges   (name, start, end, thread)            NVTX / record_function ranges
  launches (correlation, start, thread)          the runtime calls that launched kernels
  kernels  (correlation, name, start, end)       device work
A kernel belongs to a range when its launch happened inside the range's time window; ranges nest,
so a kernel counts in every enclosing range. Phase ranges (`step`, `fwd`, `bwd`, `optimizer`) and
any range of the user's take launches from every thread of the process, because autograd launches
the backward's kernels from its own worker thread. Module ranges (`fwd.layer.attn`, `bwd.layer.mlp`)
take only launches from the thread that opened them, so work on another thread does not leak in.
Both readers (torch.profiler and nsys) feed the same rule. Times are in microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

RANGE_COLUMNS = ["name", "start", "end", "thread"]
LAUNCH_COLUMNS = ["correlation", "start", "thread"]
KERNEL_COLUMNS = ["correlation", "name", "start", "end"]


MODULE_ROOTS = ("fwd", "bwd")  # the phase ranges that module ranges hang under: fwd.layer.attn


def is_module_range(name: str) -> bool:
    """A range of one module call ('fwd.layer.attn'), as opposed to a phase or a user's range."""
    root, dot, _ = str(name).partition(".")
    return bool(dot) and root in MODULE_ROOTS


@dataclass
class Trace:
    ranges: pd.DataFrame
    launches: pd.DataFrame
    kernels: pd.DataFrame


@dataclass
class Breakdown:
    """What `trainperf profile` prints: per-range table, kernels and the idle fraction."""

    ranges: pd.DataFrame  # range, calls, kernels, kernel_ms, share
    kernels: pd.DataFrame  # kernel, count, total_ms, mean_us, share; every kernel, longest first
    idle_fraction: float
    total_kernel_ms: float
    unattributed_kernels: int

    def to_dict(self) -> dict:
        return {"ranges": self.ranges.to_dict(orient="records"),
                "kernels": self.kernels.to_dict(orient="records"),
                "idle_fraction": self.idle_fraction, "total_kernel_ms": self.total_kernel_ms,
                "unattributed_kernels": self.unattributed_kernels}

    @classmethod
    def from_dict(cls, d: dict) -> Breakdown:
        kernels = d["kernels"] if "kernels" in d else d["top_kernels"]  # older files: the top 15 only
        return cls(pd.DataFrame(d["ranges"]), pd.DataFrame(kernels), d["idle_fraction"],
                   d["total_kernel_ms"], d["unattributed_kernels"])


def attribute(trace: Trace) -> pd.DataFrame:
    """One row per (range instance, kernel) pair: kernel rows joined to every enclosing range."""
    k = trace.kernels.merge(trace.launches.rename(columns={"start": "launch", "thread": "thread"}),
                            on="correlation", how="left")
    rows = []
    for r in trace.ranges.itertuples(index=False):
        same_thread = (k.thread == r.thread) if is_module_range(r.name) else True
        inside = k[same_thread & (k.launch >= r.start) & (k.launch <= r.end)]
        if len(inside):
            rows.append(pd.DataFrame({"range": r.name, "range_start": r.start,
                                      "kernel": inside["name"].to_numpy(),
                                      "dur": (inside["end"] - inside["start"]).to_numpy(),
                                      "correlation": inside["correlation"].to_numpy()}))
    if not rows:
        return pd.DataFrame(columns=["range", "range_start", "kernel", "dur", "correlation"])
    return pd.concat(rows, ignore_index=True)


def busy_time(kernels: pd.DataFrame) -> float:
    """Length of the union of kernel intervals (overlapping streams counted once)."""
    if kernels.empty:
        return 0.0
    iv = kernels[["start", "end"]].sort_values("start").to_numpy()
    total, cur_s, cur_e = 0.0, iv[0, 0], iv[0, 1]
    for s, e in iv[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return float(total + cur_e - cur_s)


def breakdown(trace: Trace) -> Breakdown:
    """Per-range calls, kernel count and kernel time; time per kernel name; GPU idle fraction."""
    kernels = trace.kernels.assign(dur=trace.kernels["end"] - trace.kernels["start"])
    total = float(kernels["dur"].sum())
    pairs = attribute(trace)
    calls = trace.ranges.groupby("name").size().rename("calls")
    per = pairs.groupby("range").agg(kernels=("kernel", "size"), kernel_us=("dur", "sum"))
    table = pd.concat([calls, per], axis=1).fillna(0).reset_index().rename(columns={"index": "range"})
    table["kernels"] = table["kernels"].astype(int)
    table["calls"] = table["calls"].astype(int)
    table["kernel_ms"] = table.pop("kernel_us") / 1e3
    table["share"] = table["kernel_ms"] / (total / 1e3) if total else np.nan
    table = table.sort_values("range").reset_index(drop=True)
    tk = kernels.groupby("name")["dur"].agg(["size", "sum", "mean"]).sort_values("sum", ascending=False)
    by_kernel = pd.DataFrame({"kernel": tk.index, "count": tk["size"].to_numpy(),
                              "total_ms": tk["sum"].to_numpy() / 1e3, "mean_us": tk["mean"].to_numpy(),
                              "share": tk["sum"].to_numpy() / total if total else np.nan})
    span = float(kernels["end"].max() - kernels["start"].min()) if len(kernels) else 0.0
    idle = 1.0 - busy_time(kernels) / span if span > 0 else float("nan")
    attributed = set(pairs["correlation"]) if len(pairs) else set()
    return Breakdown(table, by_kernel, idle, total / 1e3,
                     int((~kernels["correlation"].isin(attributed)).sum()))
