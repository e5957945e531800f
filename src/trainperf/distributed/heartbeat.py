"""What a rank tells its supervisor while it works: a file rewritten a few times a second.

The supervisor (distributed/supervisor.py) runs in another process and cannot ask a rank stuck in
a collective anything, so every rank keeps a small JSON file current from a daemon thread: the
case it is on, how many timed calls of it have started, whether it is inside a timed loop (where
a call that takes far longer than the ones before is a hang), its peak GPU memory, and where its
main thread is (a rank that sleeps or spins outside torch is the one the others wait for).

`TRAINPERF_FAULT` injects a failure into a timed call, to prove the supervisor on real runs:
`KIND:RANK:CASE:CALL` with KIND one of oom (a real out-of-memory on a GPU), raise, kill (SIGKILL),
hang (in Python), stop (SIGSTOP), spin (native code that holds the interpreter) and kernel (a GPU
kernel that never ends); CASE is the case's position in the command's list, CALL the timed call of
that case.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

INTERVAL_S = 0.2
FAULT_ENV = "TRAINPERF_FAULT"
FAULTS = ("oom", "raise", "kill", "hang", "stop", "spin", "kernel")


class Heartbeat:
    """This rank's state, written to `path` every INTERVAL_S by a daemon thread."""

    def __init__(self, path: Path, rank: int, device: torch.device) -> None:
        self.path, self.rank, self.device = path, rank, device
        self.case, self.calls, self.timed, self.done = -1, 0, False, 0
        self.call_s: list[float] = []  # seconds from one timed call's start to the next's, this loop
        self._last_call: float | None = None
        self._main = threading.main_thread().ident
        self._writing = threading.Lock()
        threading.Thread(target=self._beat, daemon=True, name="trainperf-heartbeat").start()

    def start_case(self, index: int) -> None:
        self.case, self.calls, self.timed, self.call_s = index, 0, False, []
        self._write()  # at once: a case may fail before the next beat

    def enter_loop(self, timed: bool) -> None:
        """Entering a timed loop starts its own record of call lengths: a case's loops time
        different calls (its step without synchronisation, then with it), and one loop's usual
        call says nothing of another's."""
        self.timed, self._last_call = timed, None
        if timed:
            self.call_s = []

    def timed_call(self) -> None:
        """A timed call starts: count it, and fail here if a fault is injected at this call."""
        now = time.monotonic()
        if self._last_call is not None:
            self.call_s.append(now - self._last_call)
        self._last_call = now
        self.calls += 1
        inject_fault(self.rank, self.case, self.calls, self.device)

    def peak_gb(self) -> float | None:
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device) / 2**30

    def where(self) -> str:
        """The innermost Python frame of the main thread: `file:line function`."""
        frame = sys._current_frames().get(self._main)
        if frame is None:
            return "?"
        return f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"

    def state(self) -> dict[str, Any]:
        call_s = statistics.median(self.call_s) if self.call_s else None
        return {"t": time.time(), "case": self.case, "calls": self.calls, "timed": self.timed,
                "call_s": call_s, "done": self.done, "peak_gb": self.peak_gb(), "where": self.where()}

    def _write(self) -> None:
        """The state as it is now, read and written under one lock: otherwise the thread's beat,
        read before a case starts and written after the case's own write, leaves the file naming
        the case before, and a rank killed moments later is blamed for a case that passed."""
        with self._writing:
            tmp = self.path.with_suffix(".tmp")
            try:
                tmp.write_text(json.dumps(self.state()))
                tmp.replace(self.path)
            except Exception:  # noqa: BLE001 - a beat is skipped, never the rank's work
                pass

    def _beat(self) -> None:
        while True:
            self._write()
            time.sleep(INTERVAL_S)


_current: Heartbeat | None = None


def install(heartbeat: Heartbeat | None) -> None:
    """Make `heartbeat` the one timed loops report to (None: none, as in a single process)."""
    global _current
    _current = heartbeat


class timed_loop:  # noqa: N801 - used as a context manager, like a function
    """Marks a loop of timed calls: the supervisor holds calls inside it to their usual length."""

    def __enter__(self) -> timed_loop:
        if _current is not None:
            _current.enter_loop(True)
        return self

    def __exit__(self, *exc: object) -> None:
        if _current is not None:
            _current.enter_loop(False)

    @staticmethod
    def call() -> None:
        if _current is not None:
            _current.timed_call()


def parse_fault(text: str) -> tuple[str, int, int, int]:
    """`KIND:RANK:CASE:CALL` as (kind, rank, case, call); ValueError if it is not one."""
    parts = text.split(":")
    if len(parts) != 4 or parts[0] not in FAULTS or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"{FAULT_ENV}={text!r}: expected KIND:RANK:CASE:CALL, KIND one of "
                         f"{', '.join(FAULTS)}")
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])


def inject_fault(rank: int, case: int, call: int, device: torch.device) -> None:
    text = os.environ.get(FAULT_ENV)
    if not text:
        return
    kind, at_rank, at_case, at_call = parse_fault(text)
    if (rank, case, call) != (at_rank, at_case, at_call):
        return
    if kind == "oom":
        if device.type == "cuda":  # more than the GPU holds: a real out-of-memory error
            torch.empty(2 * torch.cuda.get_device_properties(device).total_memory, dtype=torch.uint8,
                        device=device)
        raise torch.cuda.OutOfMemoryError("out of memory (injected): Tried to allocate 1024.00 GiB")
    if kind == "raise":
        raise RuntimeError(f"injected fault on rank {rank}")
    if kind in ("kill", "stop"):
        os.kill(os.getpid(), signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
    if kind == "spin":
        sum(range(10**15))  # one C call: no bytecode runs, so no other thread does either
    if kind == "kernel" and device.type == "cuda":
        torch.cuda._sleep(2**62)  # cycles: a kernel that outlives the case
        torch.cuda.synchronize(device)
    time.sleep(3600)  # hang
