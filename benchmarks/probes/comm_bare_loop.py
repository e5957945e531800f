"""How close is `trainperf comm` to a bare torch.distributed loop? all_reduce, all_gather and
reduce_scatter of float32 messages from 1 MiB to 4 GiB on every GPU of the host, each timed as
nccl-tests times it (5 warm-up calls, then 20 calls back to back between two host timestamps after
a synchronize, the slowest rank's), with nccl-tests' bus bandwidth. Nothing of trainperf is used.
usage: PYTHONPATH=src python3 benchmarks/probes/comm_bare_loop.py WORLD OUT.csv
"""

from __future__ import annotations

import csv
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [2**20 * 2**k for k in range(13)]  # 1 MiB ... 4 GiB
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
       "reduce_scatter": lambda n: (n - 1) / n}


def collective(op: str, full: torch.Tensor, part: torch.Tensor) -> None:
    if op == "all_reduce":
        dist.all_reduce(full)
    elif op == "all_gather":
        dist.all_gather_into_tensor(full, part)
    else:
        dist.reduce_scatter_tensor(part, full)


def rank_main(rank: int, world: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timedelta(seconds=300),
                            device_id=torch.device("cuda", rank))
    rows = []
    for op in BUS:
        for nbytes in SIZES:
            numel = nbytes // 4
            full = torch.ones(numel, device="cuda")
            part = torch.ones(numel // world, device="cuda")
            for _ in range(5):
                collective(op, full, part)
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(20):
                collective(op, full, part)
            torch.cuda.synchronize()
            seconds = torch.tensor([(time.perf_counter() - t0) / 20], device="cuda")
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
            algbw = nbytes / seconds.item() / 1e9
            rows.append({"op": op, "world_size": world, "bytes": nbytes, "time_us": seconds.item() * 1e6,
                         "algbw_gbps": algbw, "busbw_gbps": algbw * BUS[op](world)})
    if rank == 0:
        with open(out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        for r in rows:
            print(f"{r['op']:15s} {r['bytes'] / 2**20:8.0f} MiB {r['busbw_gbps']:8.1f} GB/s")
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1])
    mp.spawn(rank_main, args=(world, sys.argv[2]), nprocs=world)
