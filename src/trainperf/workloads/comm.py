"""Collective benchmarks (`trainperf comm`) with nccl-tests' bandwidth conventions.

size = the bytes of the op as nccl-tests counts them (all-reduce / broadcast: the buffer;
all-gather: the gathered output; reduce-scatter: the input before scattering).
algbw = size / time; busbw = algbw × factor, factor = 2(n−1)/n for all-reduce, (n−1)/n for
all-gather and reduce-scatter, 1 for broadcast: the rate each link must sustain.
Time per iteration is the slowest rank's (ranks start together after a barrier);
`all_reduce_loop` times back-to-back all-reduces without per-iteration barriers, like a bare loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trainperf.core.errors import SpecError, Unsupported
from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.core.stats import summarize
from trainperf.core.timing import synchronize
from trainperf.distributed.timing import per_rank_times, slowest
from trainperf.workloads.precision import DTYPES

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_reduce_loop")
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_reduce_loop": lambda n: 2 * (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0}
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """'1MB' → 1_000_000, '1GiB' → 2**30, '4096' → 4096."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise ValueError(text)
    value = float(m.group(1)) * _UNITS[(m.group(2) or "").upper()]
    if value <= 0:
        raise ValueError(text)
    return int(value)


@dataclass(frozen=True)
class CommSpec:
    op: str
    bytes: int
    world_size: int
    dist_backend: str
    dtype: str = "fp32"
    warmup: int = 5
    iters: int = 20

    def label(self) -> str:
        return f"{self.op} {self.bytes / 1e6:g} MB n={self.world_size} {self.dist_backend}"


def validate(spec: CommSpec) -> None:
    check_choice("op", spec.op, OPS)
    check_choice("dtype", spec.dtype, DTYPES)
    check_choice("dist_backend", spec.dist_backend, ("nccl", "gloo"))
    check_positive(spec, "iters")
    check_non_negative(spec, "warmup")
    if spec.world_size < 2:
        raise SpecError(f"--world-size must be at least 2, got {spec.world_size}")


def _operation(op: str, numel: int, rank: int, n: int, device: torch.device, dtype: torch.dtype):
    """(run, check): `run()` does the collective on fresh buffers; `check()` says if it was right."""
    chunk = max(numel // n, 1)
    total = n * (n + 1) / 2  # sum of (rank + 1) over ranks
    if op in ("all_reduce", "all_reduce_loop"):
        x = torch.full((numel,), rank + 1.0, device=device, dtype=dtype)
        return (lambda: dist.all_reduce(x)), (lambda: bool((x == total).all()))
    if op == "broadcast":
        x = torch.full((numel,), rank + 1.0, device=device, dtype=dtype)
        return (lambda: dist.broadcast(x, src=0)), (lambda: bool((x == 1).all()))
    if op == "all_gather":
        inp = torch.full((chunk,), rank + 1.0, device=device, dtype=dtype)
        out = torch.empty(chunk * n, device=device, dtype=dtype)
        expected = torch.arange(1, n + 1, device=device, dtype=dtype).repeat_interleave(chunk)
        return (lambda: dist.all_gather_into_tensor(out, inp)), (lambda: bool(torch.equal(out, expected)))
    if op == "reduce_scatter":
        inp = torch.full((chunk * n,), rank + 1.0, device=device, dtype=dtype)
        out = torch.empty(chunk, device=device, dtype=dtype)
        return (lambda: dist.reduce_scatter_tensor(out, inp)), (lambda: bool((out == total).all()))
    raise ValueError(op)


def measure_comm(spec: CommSpec, rank: int, world: int, device: torch.device) -> dict[str, Any]:
    """Check the op's result on every rank, then time it; metrics of the slowest rank."""
    dtype = DTYPES[spec.dtype]
    numel = max(spec.bytes // dtype.itemsize, world)
    try:
        run, check = _operation(spec.op, numel, rank, world, device, dtype)
        run()
    except RuntimeError as exc:
        if "not supported" in str(exc).lower() or "unsupported" in str(exc).lower():
            raise Unsupported(f"{spec.dist_backend} cannot {spec.op}: {str(exc).splitlines()[0]}") from None
        raise
    synchronize(device)
    ok = torch.tensor([1.0 if check() else 0.0], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # every rank learns if any rank was wrong
    if ok.item() != 1.0:
        raise RuntimeError(f"{spec.op} gave a wrong result on at least one rank")
    for _ in range(spec.warmup):
        run()
    synchronize(device)
    with GpuMonitor(device) as monitor:
        if spec.op == "all_reduce_loop":  # one timed call: the whole back-to-back loop
            whole_loop = per_rank_times(lambda: [run() for _ in range(spec.iters)], device, 1)
            per_rank = [[ms / spec.iters for ms in rank_times] for rank_times in whole_loop]
        else:
            per_rank = per_rank_times(run, device, spec.iters)
    s = summarize(slowest(per_rank))
    rank_medians = [summarize(t)["median"] for t in per_rank]
    seconds = s["median"] / 1e3
    algbw = numel * dtype.itemsize / seconds / 1e9
    metrics = {f"time_ms_{k}": s[k] for k in ("median", "mean", "std", "min", "n")}
    metrics.update(algbw_gbps=algbw, busbw_gbps=algbw * BUS_FACTOR[spec.op](world),
                   rank_spread=(max(rank_medians) - min(rank_medians)) / s["median"],
                   bytes=numel * dtype.itemsize, correct=True)
    metrics.update(monitor.metrics())
    return metrics
