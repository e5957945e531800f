"""Collective benchmarks (`trainperf comm`) with nccl-tests' bandwidth conventions.

size = the bytes of the op as nccl-tests counts them (all-reduce / broadcast: the buffer;
all-gather: the gathered output; reduce-scatter: the input before scattering).
algbw = size / time; busbw = algbw × factor, factor = 2(n−1)/n for all-reduce, (n−1)/n for
all-gather and reduce-scatter, 1 for broadcast: the rate each link must sustain.
Time per call is the slowest rank's. By default, as nccl-tests times it: each rank times `iters`
calls back to back (ranks start together after a barrier) and divides; `--timing per-call` times
each call on its own behind a barrier instead, for latency studies. Both check the result on every
rank before timing.
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
from trainperf.distributed.launch import placement
from trainperf.distributed.links import check_link
from trainperf.distributed.timing import per_rank_loop_times, slowest
from trainperf.workloads.precision import DTYPES

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
# loop: `iters` calls back to back between two timestamps, per rank, as nccl-tests times them (the
# bandwidth a link delivers); per-call: each call on its own behind a barrier (latency studies).
TIMINGS = ("loop", "per-call")
# Which ranks a collective spans: all of them; the ranks of each node (the links within a node);
# one rank of each node, every such group at once (the links between nodes).
SCOPES = ("all", "node", "cross")
LOOP_ROUNDS = 5  # timed loops per case: the spread between them is the record's std
IN_PLACE_ONLY = ("all_reduce", "broadcast")  # torch.distributed has no out-of-place form of these
# K, M, G (as nccl-tests reads them) and KiB, MiB, GiB are binary; KB, MB, GB decimal.
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text: str) -> int:
    """'1M' and '1MiB' → 2**20, '1MB' → 10**6, '4096' → 4096."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG](?:i?B)?|B)?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise ValueError(text)
    value = float(m.group(1)) * _UNITS[(m.group(2) or "").upper()]
    if value <= 0:
        raise ValueError(text)
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """Comma-separated sizes; 'MIN:MAX' doubles from MIN to MAX, like nccl-tests' -b MIN -e MAX -f 2."""
    sizes: list[int] = []
    for item in text.split(","):
        low, colon, high = item.partition(":")
        if not colon:
            sizes.append(parse_size(low))
            continue
        size, end = parse_size(low), parse_size(high)
        if end < size:
            raise ValueError(item)
        while size <= end:
            sizes.append(size)
            size *= 2
    return sizes


def binary_size(nbytes: float) -> str:
    """4096 → '4 KiB', the way nccl-tests' sizes read."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


@dataclass(frozen=True)
class CommSpec:
    op: str
    bytes: int
    world_size: int
    dist_backend: str
    dtype: str = "fp32"
    timing: str = "loop"  # one of TIMINGS
    in_place: bool = True
    warmup: int = 5
    iters: int = 20
    link: str = "auto"  # distributed/links.py
    scope: str = "all"  # one of SCOPES

    def label(self) -> str:
        place = "in-place" if self.in_place else "out-of-place"
        scope = f" {self.scope}" if self.scope != "all" else ""
        return (f"{self.op} {binary_size(self.bytes)} n={self.world_size}{scope} {self.dist_backend} "
                f"{self.timing} {place}")


def validate(spec: CommSpec) -> None:
    check_choice("op", spec.op, OPS)
    check_choice("timing", spec.timing, TIMINGS)
    check_choice("scope", spec.scope, SCOPES)
    check_choice("dtype", spec.dtype, DTYPES)
    check_choice("dist_backend", spec.dist_backend, ("nccl", "gloo"))
    check_link(spec.link, spec.dist_backend)
    check_positive(spec, "iters")
    check_non_negative(spec, "warmup")
    if spec.world_size < 2:
        raise SpecError(f"--world-size must be at least 2, got {spec.world_size}")


def scope_group(scope: str, rank: int, world: int) -> tuple[Any, int, int]:
    """(group, this rank's place in it, its size) of a collective of `scope`. Ranks of one node are
    numbered together, as torchrun and Slurm number them; every rank makes every group."""
    per_node = placement(world)["gpus_per_node"]
    nodes = world // per_node
    if scope == "all":
        return None, rank, world
    groups = ([list(range(n * per_node, (n + 1) * per_node)) for n in range(nodes)] if scope == "node"
              else [list(range(local, world, per_node)) for local in range(per_node)])
    if len(groups[0]) < 2:
        raise Unsupported(f"--scope {scope} spans one rank here ({nodes} node(s) of {per_node} rank(s))")
    group, _ = dist.new_subgroups_by_enumeration(groups)
    mine = next(g for g in groups if rank in g)
    return group, mine.index(rank), len(mine)


def _operation(op: str, numel: int, rank: int, n: int, device: torch.device, dtype: torch.dtype,
               in_place: bool = True, group: Any = None):
    """(run, check): `run()` does the collective on fresh buffers; `check()` says if it was right.
    In place, all-gather's input is its rank's slice of the output and reduce-scatter's output its
    rank's slice of the input, as nccl-tests' in-place variants have them. `rank` and `n` are the
    rank's place in `group` and its size (the world where None)."""
    chunk = max(numel // n, 1)
    total = n * (n + 1) / 2  # sum of (rank + 1) over ranks
    if op in IN_PLACE_ONLY and not in_place:
        raise Unsupported(f"{op} out of place: torch.distributed's {op} works in place only")
    if op == "all_reduce":
        x = torch.full((numel,), rank + 1.0, device=device, dtype=dtype)
        return (lambda: dist.all_reduce(x, group=group)), (lambda: bool((x == total).all()))
    if op == "broadcast":
        x = torch.full((numel,), rank + 1.0, device=device, dtype=dtype)
        src = dist.get_global_rank(group, 0) if group is not None else 0
        return (lambda: dist.broadcast(x, src=src, group=group)), (lambda: bool((x == 1).all()))
    if op == "all_gather":
        out = torch.empty(chunk * n, device=device, dtype=dtype)
        mine = slice(rank * chunk, (rank + 1) * chunk)
        inp = out[mine] if in_place else torch.empty(chunk, device=device, dtype=dtype)
        inp.fill_(rank + 1.0)
        expected = torch.arange(1, n + 1, device=device, dtype=dtype).repeat_interleave(chunk)
        return (lambda: dist.all_gather_into_tensor(out, inp, group=group)), \
            (lambda: bool(torch.equal(out, expected)))
    if op == "reduce_scatter":
        inp = torch.full((chunk * n,), rank + 1.0, device=device, dtype=dtype)
        mine = slice(rank * chunk, (rank + 1) * chunk)
        out = inp[mine] if in_place else torch.empty(chunk, device=device, dtype=dtype)
        return (lambda: dist.reduce_scatter_tensor(out, inp, group=group)), \
            (lambda: bool((out == total).all()))
    raise ValueError(op)


def measure_comm(spec: CommSpec, rank: int, world: int, device: torch.device) -> dict[str, Any]:
    """Check the op's result on every rank, then time it; metrics of the slowest rank."""
    dtype = DTYPES[spec.dtype]
    group, rank_in, size = scope_group(spec.scope, rank, world)
    numel = max(spec.bytes // dtype.itemsize, size)
    try:
        run, check = _operation(spec.op, numel, rank_in, size, device, dtype, spec.in_place, group)
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
        calls, rounds = (spec.iters, LOOP_ROUNDS) if spec.timing == "loop" else (1, spec.iters)
        per_rank = per_rank_loop_times(run, device, calls, rounds)
    s = summarize(slowest(per_rank))
    rank_medians = [summarize(t)["median"] for t in per_rank]
    seconds = s["median"] / 1e3
    algbw = numel * dtype.itemsize / seconds / 1e9
    metrics: dict[str, Any] = {f"time_ms_{k}": s[k] for k in ("median", "mean", "std", "min", "n")}
    metrics["time_us"] = s["median"] * 1e3  # latency, the unit small messages read in
    metrics.update(algbw_gbps=algbw, busbw_gbps=algbw * BUS_FACTOR[spec.op](size), group_size=size,
                   rank_spread=(max(rank_medians) - min(rank_medians)) / s["median"],
                   bytes=numel * dtype.itemsize, correct=True)
    metrics.update(monitor.metrics())
    return metrics
