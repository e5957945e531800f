"""Where does FSDP2's exposed communication at xl come from? xl at 8 x 2048 tokens over the ranks
of a torchrun launch, every layer checkpointed, fused AdamW, per setup NAME:COMPILE:RESHARD[:GRAPH]
(each 0 or 1; GRAPH: forward and backward replayed as a CUDA graph): the median of 6 steps after 3
warm-up ones, the GPU and host time of each phase, and one profiled step's NCCL, exposed and
host-late time per rank (profiling/overlap.py), the ranks starting it together. The profiled
step's chrome trace is kept, gzipped, for the setups named in KEEP.
usage: CONFIGS=eager-off:0:0,comp-off:1:0,graph-off:1:0:1 KEEP=comp-off OUTDIR=DIR PYTHONPATH=src \\
       python3 -m torch.distributed.run --nproc-per-node 2 benchmarks/probes/fsdp2_trace.py
"""

from __future__ import annotations

import gc
import gzip
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainperf.core.stats import summarize
from trainperf.core.timing import PhaseTimer
from trainperf.profiling.overlap import step_communication_ms
from trainperf.workloads.sharded import ShardedStep, ShardSpec


def median(values: list[float]) -> float:
    return round(summarize(values)["median"], 1)


def probe(name: str, compiled: bool, reshard: bool, graphed: bool, rank: int, world: int,
          device: torch.device, out: Path, keep: set[str]) -> None:
    spec = ShardSpec(model="xl", world_size=world, shard="full", checkpoint="full", seq=2048, batch=8,
                     optimizer="adamw-fused", compile=compiled, reshard_after_forward=reshard,
                     cuda_graph=graphed)
    step = ShardedStep(spec, rank, world, device)
    for _ in range(3):
        step()
    timer, walls = PhaseTimer(device), []
    for _ in range(6):
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        with timer.phase("step"):
            step(timer.phase)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e3)
    gpu = {k: median(v) for k, v in timer.samples().items()}
    host = {k: median(v) for k, v in timer.host_samples().items()}
    trace_path = out / f"{name}-rank{rank}.json"
    found = step_communication_ms(step, device, trace_path=trace_path)
    print(f"[{name} rank{rank}] step {median(walls)} ms; gpu {gpu}; host {host}; "
          f"comm {found['comm']:.1f} exposed {found['exposed']:.1f} "
          f"host-late {found['exposed_host']:.1f} hidden {found['hidden_share']:.2f}; "
          f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
    if name in keep:
        with open(trace_path, "rb") as raw, gzip.open(f"{trace_path}.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
    trace_path.unlink()
    del step
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    out = Path(os.environ["OUTDIR"])
    out.mkdir(parents=True, exist_ok=True)
    keep = set(os.environ.get("KEEP", "").split(","))
    for setup in os.environ.get("CONFIGS", "eager-off:0:0,comp-off:1:0,comp-on:1:1").split(","):
        name, compiled, reshard, *graphed = setup.split(":")
        probe(name, compiled == "1", reshard == "1", graphed == ["1"], rank, world, device, out, keep)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
