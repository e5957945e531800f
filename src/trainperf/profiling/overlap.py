"""How much of a step's communication the computation hides, from its kernels (as Holistic Trace
Analysis computes it): communication kernels are NCCL's, everything else is computation, and the
exposed communication is the time when a communication kernel runs and no computation does.

With the host's launch calls, exposed time splits in two. Where some computation kernel had been
launched and had not started, the GPU had work queued that waited for the collective: that time
the communication cost the step. Where none had, the host had not launched the next computation
yet (`exposed_host`): the GPU would have idled without the collective too, so that time is the
host's, and hiding the communication better would not win it back."""

from __future__ import annotations

import pandas as pd


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length where two sorted, disjoint interval lists overlap."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def is_communication(kernel_name: str) -> bool:
    return "nccl" in kernel_name.lower()


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of sorted, disjoint intervals `a` that no interval of sorted, disjoint `b` covers."""
    out, j = [], 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, at = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > at:
                out.append((at, b[k][0]))
            at = max(at, b[k][1])
            k += 1
        if at < end:
            out.append((at, end))
    return out


def communication_overlap(kernels: pd.DataFrame, launches: pd.DataFrame | None = None) -> dict[str, float]:
    """comm (time some communication kernel runs), exposed (of that, when no computation kernel
    runs) and hidden_share (1 − exposed / comm), in the kernels' time unit; with the kernels'
    `launches` (joined by correlation id), exposed_host: the exposed time when no computation
    kernel was queued either (launched, not started)."""
    comm_mask = kernels["name"].map(is_communication)
    comm = _union(list(zip(kernels.start[comm_mask], kernels.end[comm_mask], strict=True)))
    compute = _union(list(zip(kernels.start[~comm_mask], kernels.end[~comm_mask], strict=True)))
    total = _length(comm)
    exposed = _minus(comm, compute)
    exposed_total = _length(exposed)
    found = {"comm": total, "exposed": exposed_total,
             "hidden_share": 1 - exposed_total / total if total else float("nan")}
    if launches is not None:
        queued_kernels = kernels[~comm_mask].merge(launches[["correlation", "start"]], on="correlation",
                                                   suffixes=("", "_launch"))
        pairs = zip(queued_kernels.start_launch, queued_kernels.start, strict=True)
        queued = _union([(launched, start) for launched, start in pairs if launched < start])
        found["exposed_host"] = exposed_total - _intersection(exposed, queued)
    return found


def across_ranks(traced: list[dict[str, float]]) -> dict[str, float]:
    """Every rank's `step_communication_ms` as a case's metrics: the most NCCL time and exposed time
    of any rank, and the least exposed time. A rank that finishes its computation early waits for
    its peers inside the collective, which its trace shows as exposed communication; the rank that
    waited least is the one the step waits for, so its exposed time is what communication costs
    the step, and the difference from the most is time ranks spent waiting for one another."""
    found = {"nccl_ms": max(t["comm"] for t in traced), "exposed_comm_ms": max(t["exposed"] for t in traced),
             "exposed_comm_least_ms": min(t["exposed"] for t in traced)}
    if all("exposed_host" in t for t in traced):  # of the rank with the most exposed time
        found["exposed_comm_host_ms"] = max(traced, key=lambda t: t["exposed"])["exposed_host"]
    return found


def launched_in_steps(kernels: pd.DataFrame, launches: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The kernels whose launch falls inside a `step` range of the host."""
    steps = ranges[ranges.name == "step"]
    inside = launches.start.map(lambda t: bool(((steps.start <= t) & (t <= steps.end)).any()))
    return kernels[kernels.correlation.isin(launches.correlation[inside])]


def _ranks_aligned(device) -> None:  # noqa: ANN001 - a device
    """Every rank idle and past a barrier: the profiler's start-up takes each rank its own time, and
    a rank that started its step earlier would wait in the first collective, which is no cost of
    the step's."""
    import torch.distributed as dist

    from trainperf.core.timing import synchronize

    synchronize(device)
    dist.barrier()
    synchronize(device)


def step_communication_ms(step, device, trace_path=None) -> dict[str, float]:  # noqa: ANN001
    """One more call of `step` under the profiler, the ranks starting it together: the milliseconds
    NCCL kernels run (`comm`), the part of them that no computation kernel overlaps (`exposed`), of
    that the part with no computation queued (`exposed_host`), and hidden_share. `trace_path`
    keeps the step's chrome trace there."""
    from functools import partial

    import torch.distributed as dist

    from trainperf.profiling.torch_prof import profile_steps

    together = partial(_ranks_aligned, device) if dist.is_initialized() else None
    trace = profile_steps(step, device, trace_path=trace_path, before=together)
    kernels = launched_in_steps(trace.kernels, trace.launches, trace.ranges)
    found = communication_overlap(kernels, trace.launches)
    return {"comm": found["comm"] / 1e3, "exposed": found["exposed"] / 1e3,
            "exposed_host": found["exposed_host"] / 1e3, "hidden_share": found["hidden_share"]}
