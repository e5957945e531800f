"""The sweep loop: measure each spec, store a Record at once, turn failures into records.

The runner knows nothing about models: a workload is a `measure(spec) -> metrics` callable that
raises `Unsupported` for cases it cannot run and lets OOM propagate.
"""

from __future__ import annotations

import gc
import re
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import torch
from rich.console import Console

from trainperf.core import sigint
from trainperf.core.errors import Unsupported
from trainperf.core.graph_breaks import graph_break_notes
from trainperf.core.library_noise import case_notes
from trainperf.core.progress import SweepProgress
from trainperf.core.record import Record, case_key_for, spec_dict
from trainperf.core.store import Store

Measure = Callable[[Any], dict[str, Any]]


def _oom_reason(exc: BaseException) -> tuple[str, dict[str, Any]]:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    m = re.search(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB)", text)
    metrics: dict[str, Any] = {}
    if m:
        scale = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 2**20}[m.group(2)]
        metrics["oom_tried_gb"] = round(float(m.group(1)) * scale, 3)
    return text[:500], metrics


@contextmanager
def frozen_heap() -> Iterator[None]:
    """For a sweep, every object alive before it (torch's, transformers' and trainperf's modules:
    hundreds of thousands) out of the cycle collector's reach, so that each collection between
    cases (free_memory, ddp.release_memory) walks what the cases made, not the whole heap: 0.1-0.3 s
    a collection on a CPU otherwise. After it they are handed back, so nothing they hold leaks."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def free_memory() -> None:
    """Collect what a finished case left (cycles included) and hand its cached GPU blocks back, so
    that the next case's peak memory is its own."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure_case(workload: str, spec: Any, measure: Measure, env: dict[str, Any],
                 run_id: str | None = None) -> Record:
    """Run one case and describe the outcome as a Record (never raises, except Ctrl-C)."""
    sd = spec_dict(spec)
    try:
        with case_notes() as notes, graph_break_notes() as breaks:
            metrics = measure(spec)
        notes = [*notes, *breaks]
        if metrics.get("gpu_shared_with"):  # core/gpu_monitor: its time may be the two processes'
            notes = [*notes, f"another process held this GPU while timing: {metrics['gpu_shared_with']}"]
        if notes:
            metrics["notes"] = "; ".join(n for n in (metrics.get("notes"), *notes) if n)
        return Record(workload, sd, "ok", metrics, env=env, run_id=run_id)
    except (torch.cuda.OutOfMemoryError, MemoryError) as exc:
        reason, metrics = _oom_reason(exc)
        return Record(workload, sd, "oom", metrics, reason=reason, env=env, run_id=run_id)
    except Unsupported as exc:
        return Record(workload, sd, "unsupported", reason=str(exc), env=env, run_id=run_id)
    except Exception as exc:  # noqa: BLE001 - a failed case is a record, not a crashed sweep
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return Record(workload, sd, "error", reason=last[:1000], env=env, run_id=run_id)
    finally:
        free_memory()


def run_sweep(workload: str, specs: Sequence[Any], measure: Measure, store: Store,
              env: dict[str, Any], *, rerun: bool = False, label: Callable[[Any], str] = str,
              quiet: bool = False, console: Console | None = None) -> list[Record]:
    """Measure every spec not already stored; return the records for all specs, in order.

    A case that another sweep of the same store is measuring right now (the same command started
    twice, or helpers sharing the cases out) is left to it and its record read once it is stored;
    so each case is measured once, with `rerun` too (a record stored since this sweep started is
    what a rerun asked for)."""
    run_id = uuid.uuid4().hex[:12]
    since = datetime.now(timezone.utc).isoformat() if rerun else None
    out: dict[int, Record] = {}
    sigint.forget()
    console = console or Console(stderr=True)
    keys = [case_key_for(workload, spec, env) for spec in specs]
    with SweepProgress(workload, len(specs), console, quiet) as progress, frozen_heap():
        todo = list(range(len(specs)))
        while todo:
            waiting = []
            for i in todo:
                progress.show(label(specs[i]))
                record = _stored_or_measured(workload, specs[i], keys[i], measure, store, env, run_id, since)
                if record is None:
                    waiting.append(i)
                    continue
                out[i] = record
                progress.done(len(out), record.status + ("" if record.run_id == run_id else " (stored)"))
                if sigint.swallowed():
                    raise KeyboardInterrupt("stopped after the case in flight (a library had swallowed the "
                                            "Ctrl-C)")
            if waiting:
                progress.show(f"waiting for another sweep measuring {len(waiting)} case(s)")
                time.sleep(WAIT_S)
            todo = waiting
    return [out[i] for i in range(len(specs))]


WAIT_S = 0.2  # between looks at cases that another sweep is measuring


def _stored_or_measured(workload: str, spec: Any, key: str, measure: Measure, store: Store,
                        env: dict[str, Any], run_id: str, since: str | None) -> Record | None:
    """The case's record: stored already (since `since`, a rerun's start, where given), or measured
    now; None while another sweep has it."""
    stored = store.settled_case(key, since)
    if stored is not None:
        return stored
    if not store.claim(key, run_id, since=since):
        return store.settled_case(key, since)  # None: wait for the other sweep, then look again
    with store.holding(key, run_id):
        record = measure_case(workload, spec, measure, env, run_id)
        store.append(record)
        return record
