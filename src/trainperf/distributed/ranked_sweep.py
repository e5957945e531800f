"""A sweep run by every rank in lockstep; rank 0 writes one record per case.

Every rank measures every case in the same order. Under trainperf's supervisor (supervisor.py) a
rank whose case fails hands the record to `report`, which ends the rank at once: the supervisor
records the case and starts the rest afresh. Without one (a torchrun or Slurm launch), the ranks
exchange outcomes after each case, so a case that failed on any rank is recorded with that rank's
reason and all ranks move on together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainperf.core.record import Record, case_key_for
from trainperf.core.runner import frozen_heap, measure_case
from trainperf.core.store import Store
from trainperf.distributed.launch import placement

RankMeasure = Callable[[Any, int, int, torch.device], dict[str, Any]]
Report = Callable[[int, Record], None]
Done = Callable[[int, Record], None]  # rank 0's: a case's index and the record it stored


@frozen_heap()
def run_ranked_cases(rank: int, world: int, workload: str, cases: Sequence[tuple[int, Any]],
                     measure: RankMeasure, device: torch.device, db: str | Path, env: dict[str, Any],
                     heartbeat: Any = None, report: Report | None = None,
                     launch_run: str | None = None, on_done: Done | None = None) -> None:
    """Measure `cases` ((index, spec) pairs) on this rank; rank 0 stores the outcomes, each naming
    where its ranks ran (launch.placement), and hands each to `on_done`. Under a launch
    (`launch_run`, its id) rank 0 claims each case in the store while it runs, so a group the
    launcher restarts finds the case it was in."""
    store = Store(db) if rank == 0 else None
    where = placement(world)
    for index, spec in cases:
        if heartbeat is not None:
            heartbeat.start_case(index)
        key = case_key_for(workload, spec, env)
        if store is not None and launch_run:
            store.claim(key, launch_run, remeasure=True)
        rec = measure_case(workload, spec, lambda s: measure(s, rank, world, device), env, run_id=launch_run)
        if rec.status not in ("ok", "unsupported") and report is not None:
            report(index, rec)
        outcomes: list[Any] = [None] * world
        try:
            dist.all_gather_object(outcomes, (rec.status, rec.reason))
        except Exception as exc:  # a rank hung or died in this case: the exchange timed out
            if rank == 0:
                why = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
                store.append(Record(workload, rec.spec, "error", dict(where), env=env, run_id=launch_run,
                                    reason=f"not every rank finished this case: {why}"))
            raise
        failed = [(r, st, why) for r, (st, why) in enumerate(outcomes) if st != "ok"]
        if rank == 0:
            if failed:
                r, status, why = failed[0]
                rec = Record(workload, rec.spec, status, reason=f"rank {r}: {why}", env=env,
                             run_id=launch_run)
            rec.metrics.update(where)
            store.append(rec)
            if launch_run:
                store.release(key, launch_run)
            if on_done is not None:
                on_done(index, rec)
        if heartbeat is not None:
            heartbeat.done += 1
