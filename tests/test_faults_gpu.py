"""Faults injected into real NCCL runs on two GPUs: each becomes its case's record in seconds, the
next case runs in a fresh process group at its usual speed, and no process is left behind.

`TRAINPERF_FAULTS_OUT=<folder>` keeps every row (the failed case's and the next one's, with the
next case's time alone) as `faults.csv` there, written before anything is asserted."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

SRC = str(Path(__file__).parents[1] / "src")
# Two cases each: the fault strikes the first, the second must run as if alone. The batches keep the
# GPU busier than the host that launches its kernels, so one process's step is another's within a few
# percent (host-bound, the same case alone in two processes differed by up to 17%).
WORKLOADS = {
    "ddp": ["ddp", "--world-size", "2", "--model", "small", "--seq", "1024", "--batch", "16",
            "--variant", "naive,ddp", "--rounds", "1", "--warmup", "5", "--iters", "20"],
    "shard": ["shard", "--world-size", "2", "--model", "small", "--seq", "1024", "--batch", "32",
              "--checkpoint", "none,full", "--warmup", "3", "--iters", "10"],
}
ALONE = {"ddp": ["--variant", "ddp"], "shard": ["--checkpoint", "full"]}
FAULTS = {"oom:0:0:3": ("oom", 0), "raise:1:0:3": ("error", 1), "kill:1:0:3": ("error", 1),
          "hang:1:0:3": ("error", 1)}
ROWS: list[dict] = []


def trainperf(args: list[str], tmp: Path, fault: str | None = None,
              tag: str = "") -> tuple[list[dict], float, str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("TRAINPERF_FAULT", None)
    if fault:
        env["TRAINPERF_FAULT"] = fault
    out = tmp / (fault or tag).replace(":", "-")
    out.mkdir()
    start = time.monotonic()
    command = [sys.executable, "-m", "trainperf", *args, "--out", str(out), "--db", str(out / "r.db"),
               "--quiet"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / f"{args[0]}.csv") as f:
        return list(csv.DictReader(f)), wall, proc.stderr


def _spawned_ranks() -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"trainperf.distributed.supervisor" in (proc / "cmdline").read_bytes():
                found.append(proc.name)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_each_fault_on_one_rank_is_a_row_in_seconds_and_the_next_case_runs_as_alone(workload, tmp_path):
    """Every fault runs before anything is asserted, so one run shows them all; the next case's
    time is held to the band of the same case run alone before and after the faults (±5%)."""
    args = WORKLOADS[workload]
    before, _, _ = trainperf(args + ALONE[workload], tmp_path, tag="alone-before")
    runs = {fault: trainperf(args, tmp_path, fault) for fault in FAULTS}
    after, _, _ = trainperf(args + ALONE[workload], tmp_path, tag="alone-after")
    alone = [float(before[0]["step_ms_median"]), float(after[0]["step_ms_median"])]
    for fault, (rows, wall, stderr) in runs.items():
        bad, nxt = rows
        ROWS.append({"workload": workload, "fault": fault, "status": bad["status"],
                     "reason": bad["reason"][:160], "failed_rank": bad["failed_rank"],
                     "detect_s": bad["detect_s"], "peak_mem_gb": bad.get("peak_mem_gb"),
                     "wall_s": round(wall, 1), "next_status": nxt["status"],
                     "next_step_ms": nxt["step_ms_median"], "alone_step_ms_before": alone[0],
                     "alone_step_ms_after": alone[1], "stderr_lines": len(stderr.strip().splitlines())})
    _keep(ROWS)  # before any assertion: a failed or cut-short run still leaves its rows
    for fault, (rows, _, stderr) in runs.items():
        bad, nxt = rows
        status, rank = FAULTS[fault]
        assert bad["status"] == status and int(float(bad["failed_rank"])) == rank, (fault, bad)
        assert float(bad["detect_s"]) < 30, (fault, bad)
        assert Path(bad["log"]).exists()
        assert nxt["status"] == "ok", (fault, nxt)
        # what a leftover rank would cost (an NCCL kernel spinning on the GPU, its memory held) makes
        # the next case slower; faster than alone is no harm
        assert float(nxt["step_ms_median"]) <= 1.05 * max(alone), (fault, nxt, alone)
        assert len(stderr.strip().splitlines()) == 1, (fault, stderr)  # one line a failed case
    assert _spawned_ranks() == []


def _keep(rows: list[dict]) -> None:
    """Write the rows so far to $TRAINPERF_FAULTS_OUT/faults.csv and print them."""
    folder = os.environ.get("TRAINPERF_FAULTS_OUT")
    for row in rows:
        print(row, flush=True)
    if folder and rows:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with open(Path(folder) / "faults.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
