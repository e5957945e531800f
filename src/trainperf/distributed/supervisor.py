"""Multi-GPU cases under a supervisor: a failing rank ends its case in seconds, as a record.

A collective in flight cannot be left by raising, and NCCL's watchdog takes minutes to kill what
waits on a dead peer. So the ranks never decide among themselves that a case failed: this process
starts them, watches them and ends them. Each rank runs the cases in order (ranked_sweep.py) and
keeps a heartbeat file (heartbeat.py); a rank whose case fails writes why and exits at once. The
supervisor looks every POLL_S and ends the run's processes on the first of
  - a rank's report of a failed case (out of memory, an exception),
  - a rank that died without a report (a signal, the OOM killer),
  - no rank making progress: inside a timed loop for max(stall_s, STALL_CALLS x the usual call),
    elsewhere (building, compiling, warming up) for `timeout_s`;
stores that case's record (status, failing rank, reason, its peak memory, `detect_s`: seconds from
the failure to the run moving on, the rank's log file) and starts a fresh process group for the
cases after it. Everything NCCL and PyTorch print goes to one log file per rank under `log_dir`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainperf.core.gpu_monitor import nvml_module
from trainperf.core.record import Record, case_key_for, spec_dict
from trainperf.core.store import Store
from trainperf.distributed.heartbeat import INTERVAL_S
from trainperf.distributed.launch import adopt_environment, log_to, placement

POLL_S = 0.1
STALL_CALLS = 10  # a timed call this many times longer than the usual one is a hang
DEFAULT_STALL_S = 10.0  # ... but never less than this
DEFAULT_TIMEOUT_S = 300.0  # without progress outside timed loops (compiles take minutes)
PG_TIMEOUT_MARGIN_S = 60.0  # the process group waits longer: its watchdog is the last resort
RELEASE_S = 30.0  # at most, for the GPUs to let go of ended ranks
TORCH_DIR = str(Path(torch.__file__).parent)
COLLECTIVES = "distributed_c10d.py"  # where a rank waiting for its peers sits
SILENT_S = 10 * INTERVAL_S  # a heartbeat this old: the rank's process no longer runs Python

Measure = Callable[[Any, int, int, torch.device], dict[str, Any]]
Say = Callable[[str], None]


@dataclass
class Failure:
    """Why a run stopped: the case, the rank held responsible, and what it left."""

    case: int
    rank: int | None
    status: str  # oom | error
    reason: str
    when: float  # epoch seconds of the failure (or of the last progress, for a hang)
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankFiles:
    """Where a run's ranks write their reports, heartbeats and end markers."""

    folder: Path

    def report(self, rank: int) -> Path:
        return self.folder / f"failed{rank}.json"

    def heartbeat(self, rank: int) -> Path:
        return self.folder / f"heartbeat{rank}.json"

    def finished(self, rank: int) -> Path:
        return self.folder / f"finished{rank}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def log_path(log_dir: Path, workload: str, rank: int) -> Path:
    return log_dir / f"{workload}-rank{rank}.log"


def _rank_main(rank: int, world: int, backend: str, port: int, timeout_s: float, workload: str,
               cases: list[tuple[int, Any]], measure: Measure, db: str, env: dict[str, Any],
               folder: str, log_dir: str, environ: dict[str, str]) -> None:
    """One rank of one run: its output to its log, the process group on its device (in `environ`,
    the supervisor's environment: a rank forked from a fork server has the server's), the cases."""
    adopt_environment(environ)
    log_to(log_path(Path(log_dir), workload, rank))
    from trainperf.core.library_noise import quiet_libraries
    from trainperf.distributed.heartbeat import Heartbeat, install
    from trainperf.distributed.launch import init_rank
    from trainperf.distributed.ranked_sweep import run_ranked_cases

    quiet_libraries()  # the log keeps what says something; --verbose keeps everything
    files = RankFiles(Path(folder))
    device = init_rank(rank, world, backend, port, timeout_s + PG_TIMEOUT_MARGIN_S)
    beat = Heartbeat(files.heartbeat(rank), rank, device)
    install(beat)

    def report(index: int, rec: Record) -> None:
        failure = {"case": index, "status": rec.status, "reason": rec.reason, "when": time.time(),
                   "metrics": {**rec.metrics, "peak_mem_gb": beat.peak_gb()}}
        tmp = files.report(rank).with_suffix(".tmp")
        tmp.write_text(json.dumps(failure, default=str))
        tmp.replace(files.report(rank))
        os._exit(1)  # a collective in flight cannot be left any other way; the supervisor ends the rest

    try:
        run_ranked_cases(rank, world, workload, cases, measure, device, db, env, beat, report)
    except BaseException as exc:  # noqa: BLE001 - outside a case (set-up, the exchange): still a report
        line = traceback.format_exception_only(type(exc), exc)[-1].strip()
        report(beat.case, Record(workload, {}, "error", reason=line))
    files.finished(rank).touch()
    os._exit(0)  # no teardown: a process group's destructors can abort or wait on peers


Progress = Callable[[int, Any, str], None]  # cases finished, the latest one's spec, its stored status


class Supervisor:
    """Runs `cases` (index, spec) of `workload` on `world` ranks, each failure a record."""

    def __init__(self, workload: str, measure: Measure, world: int, backend: str, db: Path,
                 env: dict[str, Any], log_dir: Path, timeout_s: float = DEFAULT_TIMEOUT_S,
                 stall_s: float = DEFAULT_STALL_S, say: Say = print,
                 on_progress: Progress = lambda done, spec, status: None,
                 environ: dict[str, str] | None = None) -> None:
        self.workload, self.measure, self.world, self.backend = workload, measure, world, backend
        self.db, self.env, self.log_dir = db, env, log_dir
        self.timeout_s, self.stall_s, self.say, self.on_progress = timeout_s, stall_s, say, on_progress
        self.environ = environ or {}

    def run(self, cases: Sequence[tuple[int, Any]]) -> list[Record]:
        """Measure every case; the records of failed cases (the others rank 0 stored itself). Each
        finished case goes to `on_progress` once, in order: how many are finished, its spec, the
        status it was stored with."""
        from trainperf.distributed.launch import free_port, rank_context

        self.log_dir.mkdir(parents=True, exist_ok=True)
        quiet_resource_tracker()
        failed: list[Record] = []
        pending = list(cases)
        told = 0  # cases handed to on_progress: they finish in order, a failed one ending its group

        def tell(upto: int, failure: Record | None = None) -> None:
            nonlocal told
            store = Store(self.db)
            for _, spec in cases[told:upto]:
                stored = failure if failure is not None and told == upto - 1 else store.find_case(
                    case_key_for(self.workload, spec, self.env))
                told += 1
                self.on_progress(told, spec, stored.status if stored is not None else "")

        while pending:
            base = len(cases) - len(pending)
            with tempfile.TemporaryDirectory(prefix="trainperf-ranks-") as folder:
                files = RankFiles(Path(folder))
                ctx, port = rank_context(), free_port()
                procs = [ctx.Process(target=_rank_main, args=(
                    r, self.world, self.backend, port, self.timeout_s, self.workload, pending, self.measure,
                    str(self.db), self.env, folder, str(self.log_dir), {**os.environ, **self.environ}))
                    for r in range(self.world)]
                for p in procs:
                    p.start()
                try:
                    failure = self._watch(procs, files, lambda done, base=base: tell(base + done))
                finally:
                    _end(procs)
                if failure is None:
                    tell(len(cases))
                    return failed
                record = self._record(failure, pending)
                Store(self.db).append(record)
                failed.append(record)
                pending = [(i, s) for i, s in pending if i > failure.case]
                tell(len(cases) - len(pending), record)
        return failed

    def _record(self, failure: Failure, pending: Sequence[tuple[int, Any]]) -> Record:
        spec = dict(pending)[failure.case]
        detect_s = round(time.time() - failure.when, 2)
        who = f"rank {failure.rank}" if failure.rank is not None else "every rank"
        log = log_path(self.log_dir, self.workload, failure.rank or 0)
        metrics = {**failure.metrics, "failed_rank": failure.rank, "detect_s": detect_s, "log": str(log),
                   **placement(self.world)}
        label = spec.label() if hasattr(spec, "label") else str(spec_dict(spec))
        self.say(f"{label}: {failure.status} on {who}: {failure.reason} (ended {detect_s:.1f} s after the "
                 f"failure; log {log})")
        return Record(self.workload, spec_dict(spec), failure.status, metrics,
                      reason=f"{who}: {failure.reason}", env=self.env)

    def _watch(self, procs: list[Any], files: RankFiles, finished: Callable[[int], None]) -> Failure | None:
        """Wait for the run to end; the failure that ended it, or None when every rank finished.
        `finished` hears how many of the group's cases rank 0 has stored, as that grows."""
        progress: dict[int, tuple[Any, float]] = {}  # rank -> ((case, calls), when it last moved)
        dead_since: dict[int, float] = {}
        done = 0
        while True:
            now = time.time()
            reports = {r: rep for r in range(self.world) if (rep := _read_json(files.report(r)))}
            if reports:
                time.sleep(POLL_S)  # the peers' reports of the same failure come in a moment
                return self._cause(procs, files, beats={}, seen=now)
            beats = {r: hb for r in range(self.world) if (hb := _read_json(files.heartbeat(r)))}
            for r, p in enumerate(procs):
                if p.exitcode not in (None, 0) and not files.finished(r).exists():
                    dead_since.setdefault(r, now)
            if dead_since and now - min(dead_since.values()) > 2 * POLL_S:  # a report may still come
                return self._cause(procs, files, beats, min(dead_since.values()))
            if all(p.exitcode is not None for p in procs) and not dead_since:
                return None
            for r, hb in beats.items():
                mark = (hb["case"], hb["calls"])
                if r not in progress or progress[r][0] != mark:
                    progress[r] = (mark, now)
            if 0 in beats and beats[0]["done"] > done:
                done = beats[0]["done"]
                finished(done)
            if len(progress) == self.world:
                last_move = max(when for _, when in progress.values())
                usual = [hb["call_s"] for hb in beats.values() if hb["timed"] and hb["call_s"]]
                limit = max(self.stall_s, STALL_CALLS * max(usual)) if usual else self.timeout_s
                if now - last_move > limit:
                    return _stall(beats, last_move, limit, now, [p.pid for p in procs])
            time.sleep(POLL_S)

    def _cause(self, procs: list[Any], files: RankFiles, beats: dict[int, dict[str, Any]],
               seen: float) -> Failure:
        """A rank that died without a word (a signal) is the cause; else the earliest report (later
        ones are peers losing their connection to it)."""
        reports = {r: rep for r in range(self.world) if (rep := _read_json(files.report(r)))}
        silent = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in reports
                  and not files.finished(r).exists()]
        if silent:  # called on a death without a report, or on reports: one of the two is there
            r = silent[0]
            beat = beats.get(r) or _read_json(files.heartbeat(r))
            return _death(r, procs[r].exitcode, beat, seen)
        return _first_report(reports)


def _first_report(reports: dict[int, dict[str, Any]]) -> Failure:
    rank, rep = min(reports.items(), key=lambda kv: kv[1]["when"])
    status = rep["status"] if rep["status"] in ("oom", "error") else "error"
    return Failure(rep["case"], rank, status, rep["reason"] or "failed", rep["when"], rep.get("metrics", {}))


def _death(rank: int, exitcode: int | None, beat: dict[str, Any] | None, seen: float) -> Failure:
    how = (f"killed by {signal.Signals(-exitcode).name}" if exitcode is not None and exitcode < 0
           else f"exited with code {exitcode}")
    metrics = {"peak_mem_gb": beat["peak_gb"]} if beat else {}
    return Failure(beat["case"] if beat else -1, rank, "error", f"the process was {how}", seen, metrics)


def _stall(beats: dict[int, dict[str, Any]], last_move: float, limit: float, now: float,
           pids: Sequence[int]) -> Failure:
    """Every rank stopped moving: the one the others wait for is, by the first test that singles
    out one rank, the one whose heartbeat went silent too (a stopped process, or native code that
    never lets the interpreter go), the one whose main thread is outside torch (a Python hang), the
    one not inside a collective (a kernel that never ends, waited for in a synchronize)."""
    ranks = sorted(beats)
    silent = [r for r in ranks if now - beats[r]["t"] > SILENT_S]
    outside = [r for r in ranks if TORCH_DIR not in beats[r]["where"]]
    not_waiting = [r for r in ranks if COLLECTIVES not in beats[r]["where"]]
    rank = next((found[0] for found in (silent, outside, not_waiting) if len(found) == 1), None)
    beat = beats[0 if rank is None else rank]
    where = beat["where"]
    at = f"in {Path(where.split(':')[0]).name} ({where.split(' ')[-1]})"
    if rank is not None and silent == [rank]:
        at = ("(the process is stopped: SIGSTOP or a debugger)" if _stopped(pids[rank]) else
              f"(native code holds its interpreter; last seen {at})")
    return Failure(beat["case"], rank, "error", f"stopped responding for {limit:.0f} s {at}", last_move,
                   {"peak_mem_gb": beat["peak_gb"]})


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped by a signal (Linux /proc; False where unknown)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _end(procs: list[Any]) -> None:
    """SIGKILL every rank still running and reap them all: nothing is left behind. Then wait (up to
    RELEASE_S) until no GPU lists them any more: the driver frees a killed process's context, and
    with it an NCCL kernel still spinning, after the process is gone, and the next case must not
    share the GPU with it."""
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=30)
    pids = {p.pid for p in procs}
    deadline = time.time() + RELEASE_S
    while _pids_on_gpus() & pids and time.time() < deadline:
        time.sleep(POLL_S)


TRACKER_WARNING = "ignore:resource_tracker:UserWarning"


def quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker without its warning about leaked semaphores (unless
    verbose). A rank that dies (killed, or ended after a failure) leaves the semaphores its compile
    workers made; the tracker, a child of this process that outlives it briefly, removes them and
    says so on the console after trainperf's last line. It takes its warning filters from the
    command line that starts it, so the filter goes in first; a tracker already running keeps its own."""
    from multiprocessing import resource_tracker

    from trainperf.core.library_noise import verbose

    if not verbose() and TRACKER_WARNING not in sys.warnoptions:
        sys.warnoptions.append(TRACKER_WARNING)
    resource_tracker.ensure_running()


def _pids_on_gpus() -> set[int]:
    """The processes NVML lists on any GPU of this host (none where NVML is missing)."""
    nvml = nvml_module()
    if nvml is None:
        return set()
    try:
        nvml.nvmlInit()
        try:
            return {proc.pid for i in range(nvml.nvmlDeviceGetCount())
                    for proc in nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(i))}
        finally:
            nvml.nvmlShutdown()
    except nvml.NVMLError:
        return set()
