"""A sweep shared out over helper processes, each on a GPU of its own.

Only for cases whose record does not depend on the speed they ran at (a loss curve, not a time),
where many long runs would otherwise queue for one GPU while the others idle. The helpers run
the same sweep on the same store, and the store's claims measure each case once (core/runner).
The command's own process takes part too, on its GPU; its sweep ends once every
case is stored, whoever measured it, and it alone shows and writes the results. A helper that
dies leaves its case's claim to be taken over; a Ctrl-C ends every helper with the command.

`python -m trainperf.core.shared_sweep PAYLOAD` is one helper: PAYLOAD is the pickled sweep
(workload, specs, measure function, store, rerun, device type), the GPU its CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from trainperf.core.errors import SpecError

STOP_S = 30.0  # how long helpers get to stop after a Ctrl-C, or to finish once every case is stored


def helper_places(device: torch.device, jobs: int) -> list[str]:
    """Where the `jobs - 1` helpers run: each a GPU of its own other than `device`'s (its
    CUDA_VISIBLE_DEVICES value), or on the CPU 'cpu' for each (they share it)."""
    if device.type != "cuda":
        cores = os.cpu_count() or 1
        if not 1 <= jobs <= cores:
            raise SpecError(f"--jobs must be between 1 and {cores} (this machine's CPU cores), got {jobs}")
        return ["cpu"] * (jobs - 1)
    count = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [g.strip() for g in visible.split(",")][:count] if visible else [str(i) for i in range(count)]
    if not 1 <= jobs <= len(ids):
        raise SpecError(f"--jobs must be between 1 and {len(ids)} (one process a GPU, and {len(ids)} "
                        f"GPU(s) are visible), got {jobs}")
    own = device.index if device.index is not None else torch.cuda.current_device()
    return [g for i, g in enumerate(ids) if i != own][:jobs - 1]


@contextlib.contextmanager
def helpers(workload: str, specs: Sequence[Any], measure: Callable[[Any], dict[str, Any]], db: Path,
            places: Sequence[str], rerun: bool, say: Callable[[str], None] = print) -> Iterator[None]:
    """Helpers running the sweep of `specs` into `db`, one at each of `places`, while the body runs
    the same sweep; after it, they are waited for (every case is stored by then), and a helper that
    failed is said, with the last line it wrote. On an exception (a Ctrl-C) they are stopped."""
    if not places:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="trainperf-helpers-") as tmp:
        payload = Path(tmp) / "sweep.pkl"
        device = "cpu" if places[0] == "cpu" else "cuda"
        payload.write_bytes(pickle.dumps((workload, list(specs), measure, str(db), rerun, device)))
        procs = [_start(payload, place, Path(tmp) / f"helper-{i}.log") for i, place in enumerate(places)]
        try:
            yield
        except BaseException:
            _stop(procs)
            raise
        for (proc, log), place in zip(procs, places, strict=True):
            try:
                code = proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code:
                lines = log.read_text(errors="replace").strip().splitlines() or ["(nothing)"]
                where = "the CPU" if place == "cpu" else f"GPU {place}"
                say(f"a helper on {where} stopped with exit code {code}: {lines[-1]}; its cases were "
                    "measured here")


def _start(payload: Path, place: str, log: Path) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ)
    if place != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = place
    with log.open("w") as file:  # the child holds its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "trainperf.core.shared_sweep", str(payload)],
                                env=env, stdin=subprocess.DEVNULL, stdout=file, stderr=subprocess.STDOUT)
    return proc, log


def _stop(procs: list[tuple[subprocess.Popen, Path]]) -> None:
    """SIGINT to each helper (a terminal's Ctrl-C reached them already; a signal to the command
    alone did not), then a kill for one that does not stop in time."""
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc, _ in procs:
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(payload: str) -> None:
    """One helper: the pickled sweep, on this process's first GPU (or the CPU), quietly."""
    from trainperf.core import env as envmod
    from trainperf.core.runner import run_sweep
    from trainperf.core.sigint import quiet_forkserver
    from trainperf.core.store import Store

    # the command stops its helpers with SIGINT (_stop): taken here even where the command was
    # started with SIGINT ignored (a background job of a script), which its children inherit
    signal.signal(signal.SIGINT, signal.default_int_handler)
    quiet_forkserver()
    workload, specs, measure, db, rerun, device = pickle.loads(Path(payload).read_bytes())
    run_sweep(workload, specs, measure, Store(db), envmod.capture(torch.device(device)), rerun=rerun,
              quiet=True)


if __name__ == "__main__":
    main(sys.argv[1])
