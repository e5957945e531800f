"""Profiles of one rank of a sharded training step: every rank trains in lockstep (the collectives
need them all), and the chosen rank runs its steps under the profiler and writes the files."""

from __future__ import annotations

from pathlib import Path

from trainperf.distributed.launch import rank_device
from trainperf.workloads.sharded import ShardedStep, ShardSpec

PROFILE_WARMUP = 2  # what profile_workload runs before its profiled steps


def profile_rank(rank: int, world: int, spec: ShardSpec, target: int, kind: str, out: str, name: str,
                 meta: dict) -> None:
    """Entry point of every rank (top level, so that spawn can pickle it). `kind`: profile | memory."""
    from trainperf.profiling.memory import memory_profile
    from trainperf.profiling.session import profile_workload, save_breakdown

    device = rank_device(spec.dist_backend, rank)
    step = ShardedStep(spec, rank, world, device)
    if rank != target:  # as many steps as the profiled rank runs
        for _ in range(PROFILE_WARMUP + spec.iters if kind == "profile" else 2):
            step()
        return
    if kind == "profile":
        bd = profile_workload(step, step.model, device, steps=spec.iters, warmup=PROFILE_WARMUP)
        save_breakdown(bd, Path(out) / f"profile_{name}", {**meta, "rank": rank})
    else:  # the tables go to files: the launching process shows them
        rep = memory_profile(step, step.model, device, Path(out), name)
        rep.phases.to_csv(Path(out) / f"memory_{name}_phases.csv", index=False)
        rep.largest.to_csv(Path(out) / f"memory_{name}_largest.csv", index=False)
