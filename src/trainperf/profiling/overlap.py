"""How much of a step's communication the computation hides, from its kernels (as Holistic Trace
Analysis computes it): communication kernels are NCCL's, everything else is computation, and the
exposed communication is the time when a communication kernel runs and no computation does."""

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


def communication_overlap(kernels: pd.DataFrame) -> dict[str, float]:
    """comm (time some communication kernel runs), exposed (of that, when no computation kernel
    runs) and hidden_share (1 − exposed / comm), in the kernels' time unit."""
    comm_mask = kernels["name"].map(is_communication)
    comm = _union(list(zip(kernels.start[comm_mask], kernels.end[comm_mask], strict=True)))
    compute = _union(list(zip(kernels.start[~comm_mask], kernels.end[~comm_mask], strict=True)))
    total = _length(comm)
    exposed = total - _intersection(comm, compute)
    return {"comm": total, "exposed": exposed, "hidden_share": 1 - exposed / total if total else float("nan")}


def step_communication_ms(step, device) -> dict[str, float]:  # noqa: ANN001 - a callable, a device
    """One more call of `step` under the profiler: the milliseconds NCCL kernels run (`comm`), the
    part of them that no computation kernel overlaps (`exposed`), and hidden_share."""
    from trainperf.profiling.torch_prof import profile_steps

    found = communication_overlap(profile_steps(step, device).kernels)
    return {"comm": found["comm"] / 1e3, "exposed": found["exposed"] / 1e3,
            "hidden_share": found["hidden_share"]}
