"""How long a collective takes on this machine's links: the bus bandwidth `trainperf comm` measured
per operation and size within a node, and between nodes the bandwidth `comm --scope cross` measured
over a multi-node launch, or else a given per-GPU rate.

time = size · factor(n) / busbw(size), nccl-tests' conventions (workloads/comm.py): the bus bandwidth
of a size between two measured ones is interpolated in log size, held at the ends. Within a node the
measured curve of the nearest measured rank count stands for any count (NVSwitch gives every pair
the same links). Across nodes the bus bandwidth is the lower of that curve and the network's (a
ring's slowest link), and each node the ring crosses adds `HOP_LATENCY_MS`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainperf.core.errors import SpecError
from trainperf.workloads.comm import BUS_FACTOR

HOP_LATENCY_MS = 0.01  # a network hop of a ring across nodes (InfiniBand/RoCE: a few microseconds)
NETWORK_EFFICIENCY = 0.9  # of a NIC's line rate a ring's bus bandwidth reaches (NCCL over InfiniBand)
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(Gb|GB)(?:/s|ps)?\s*", flags=re.IGNORECASE)


def parse_rate(text: str) -> float:
    """A per-GPU network rate in GB/s: a lower-case b counts bits ('400Gb', '400Gb/s', '400gbps': 50 GB/s),
    an upper-case B bytes ('50GB')."""
    m = _RATE.fullmatch(text)
    if not m or float(m.group(1)) <= 0:
        raise SpecError(f"--inter-node {text!r}: give a rate per GPU such as 400Gb (bits) or 50GB (bytes)")
    return float(m.group(1)) / (8 if m.group(2).endswith("b") else 1)


Curve = list[tuple[int, float]]  # [(bytes, busbw GB/s)], by size


def interpolated(points: Curve, nbytes: float) -> float:
    """The bus bandwidth at `nbytes`, in log size between the measured sizes, held at the ends."""
    if nbytes <= points[0][0]:
        return points[0][1]
    for (b0, w0), (b1, w1) in zip(points, points[1:], strict=False):
        if nbytes <= b1:
            x = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return w0 + x * (w1 - w0)
    return points[-1][1]


@dataclass(frozen=True)
class Links:
    curves: Mapping[str, Mapping[int, Curve]]  # op → ranks within a node → curve
    source: str  # which records the curves come from
    inter_node_gbs: float | None = None  # given: per GPU, line rate (wins over `between`)
    gpus_per_node: int = 8
    between: Mapping[str, Curve] = field(default_factory=dict)  # op → curve measured across nodes

    def placed(self, gpus_per_node: int, inter_node_gbs: float | None) -> Links:
        """These links in nodes of `gpus_per_node`, with a given network rate (None: the measured one)."""
        return replace(self, gpus_per_node=gpus_per_node, inter_node_gbs=inter_node_gbs)

    def network(self) -> str:
        """Where the bandwidth between nodes comes from, in words."""
        if self.inter_node_gbs is not None:
            return f"{self.inter_node_gbs:g} GB/s per GPU (given)"
        return "measured (comm --scope cross)" if self.between else "none"

    def collective_ms(self, op: str, nbytes: float, ranks: int, nodes: int | None = None) -> float:
        """One `op` of `nbytes` (nccl-tests' size) over `ranks` ranks on `nodes` nodes (default:
        placed node by node)."""
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        nodes = nodes or math.ceil(ranks / self.gpus_per_node)
        busbw = self.busbw(op, nbytes, math.ceil(ranks / nodes))
        hops = 0.0
        if nodes > 1:
            if self.inter_node_gbs is not None:
                busbw = min(busbw, self.inter_node_gbs * NETWORK_EFFICIENCY)
            elif op in self.between:
                busbw = min(busbw, interpolated(self.between[op], nbytes))
            else:
                raise SpecError(f"{ranks} ranks span {nodes} nodes and no `comm --scope cross` records "
                                f"measured the network: give --inter-node (a GPU's network rate)")
            hops = nodes * HOP_LATENCY_MS
        return nbytes * BUS_FACTOR[op](ranks) / (busbw * 1e9) * 1e3 + hops

    def busbw(self, op: str, nbytes: float, ranks: int) -> float:
        by_ranks = self.curves.get(op)
        if not by_ranks:
            raise SpecError(f"no {op} records among {self.source}: run `trainperf comm --op {op}` first")
        nearest = min(by_ranks, key=lambda n: (abs(n - ranks), -n))
        return interpolated(by_ranks[nearest], nbytes)


def links_from_records(records: Iterable[Mapping[str, Any]], source: str, inter_node_gbs: float | None = None,
                       gpus_per_node: int = 8) -> Links:
    """The bus bandwidth curves of `comm` records (ok, NCCL, back-to-back timing): within a node
    those of one node's ranks (all of a one-node run, or `--scope node`), between nodes `--scope
    cross`. A run over several nodes with `--scope all` mixes both and is left out."""
    within: dict[str, dict[int, dict[int, float]]] = {}
    across: dict[str, dict[int, float]] = {}
    for r in records:
        if r.get("status") != "ok" or r.get("dist_backend") != "nccl" or r.get("timing", "loop") != "loop":
            continue
        scope = r.get("scope") if isinstance(r.get("scope"), str) else "all"
        nodes = r.get("nodes")
        spans_nodes = isinstance(nodes, int | float) and nodes > 1  # NaN (no such field) compares False
        if not r.get("busbw_gbps") or (scope == "all" and spans_nodes):
            continue
        ranks = int(r.get("group_size") or r["world_size"]) if scope != "all" else int(r["world_size"])
        point = (across.setdefault(str(r["op"]), {}) if scope == "cross"
                 else within.setdefault(str(r["op"]), {}).setdefault(ranks, {}))
        point[int(r["bytes"])] = max(point.get(int(r["bytes"]), 0.0), float(r["busbw_gbps"]))
    if not within:
        raise SpecError(f"no NCCL `comm` records in {source}: run `trainperf comm` on these GPUs first")
    return Links({op: {n: sorted(pts.items()) for n, pts in by.items()} for op, by in within.items()}, source,
                 inter_node_gbs, gpus_per_node, {op: sorted(pts.items()) for op, pts in across.items()})
