"""A sweep run by every rank in lockstep; rank 0 writes one record per case.

Every rank measures every case in the same order. After each case the ranks exchange outcomes,
so a case that failed on any rank is recorded with that rank's reason and all ranks move on
together (no rank is left waiting in a collective of the next case).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console
from rich.progress import Progress

from trainperf.core.record import Record
from trainperf.core.runner import measure_case
from trainperf.core.store import Store

RankMeasure = Callable[[Any, int, int, torch.device], dict[str, Any]]


def run_ranked_cases(rank: int, world: int, workload: str, specs: Sequence[Any], measure: RankMeasure,
                     device: torch.device, db: str | Path, env: dict[str, Any], quiet: bool) -> None:
    store = Store(db) if rank == 0 else None
    with Progress(console=Console(stderr=True), disable=quiet or rank != 0) as progress:
        task = progress.add_task(f"{workload} (world size {world})", total=len(specs))
        for spec in specs:
            rec = measure_case(workload, spec, lambda s: measure(s, rank, world, device), env)
            outcomes: list[Any] = [None] * world
            try:
                dist.all_gather_object(outcomes, (rec.status, rec.reason))
            except Exception as exc:  # a rank hung or died in this case: the exchange timed out
                if rank == 0:
                    why = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
                    store.append(Record(workload, rec.spec, "error", env=env,
                                        reason=f"not every rank finished this case: {why}"))
                raise
            failed = [(r, st, why) for r, (st, why) in enumerate(outcomes) if st != "ok"]
            if rank == 0:
                if failed:
                    r, status, why = failed[0]
                    rec = Record(workload, rec.spec, status, reason=f"rank {r}: {why}", env=env)
                store.append(rec)
            progress.advance(task)
