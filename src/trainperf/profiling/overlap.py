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


def across_ranks(traced: list[dict[str, float]]) -> dict[str, float]:
    """Every rank's `step_communication_ms` as a case's metrics: the most NCCL time and exposed time
    of any rank, and the least exposed time. A rank that finishes its computation early waits for
    its peers inside the collective, which its trace shows as exposed communication; the rank that
    waited least is the one the step waits for, so its exposed time is what communication costs
    the step, and the difference from the most is time ranks spent waiting for one another."""
    return {"nccl_ms": max(t["comm"] for t in traced), "exposed_comm_ms": max(t["exposed"] for t in traced),
            "exposed_comm_least_ms": min(t["exposed"] for t in traced)}


def step_communication_ms(step, device) -> dict[str, float]:  # noqa: ANN001 - a callable, a device
    """One more call of `step` under the profiler: the milliseconds NCCL kernels run (`comm`), the
    part of them that no computation kernel overlaps (`exposed`), and hidden_share."""
    from trainperf.profiling.torch_prof import profile_steps

    found = communication_overlap(profile_steps(step, device).kernels)
    return {"comm": found["comm"] / 1e3, "exposed": found["exposed"] / 1e3,
            "hidden_share": found["hidden_share"]}
