"""Timing a call on every rank: all ranks start each call together, the slowest one counts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from trainperf.core.timing import synchronize
from trainperf.distributed.heartbeat import timed_loop


def per_rank_times(fn: Callable[[], object], device: Any, iters: int) -> list[list[float]]:
    """Every rank's milliseconds for each of `iters` calls of `fn`, gathered on all ranks."""
    times = []
    with timed_loop():
        for _ in range(iters):
            synchronize(device)
            dist.barrier()
            timed_loop.call()
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            times.append((time.perf_counter() - t0) * 1e3)
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, times)
    return everyone


def per_rank_loop_times(fn: Callable[[], object], device: Any, calls: int, rounds: int) -> list[list[float]]:
    """Every rank's milliseconds per call of `fn`, timed as nccl-tests does: `calls` calls back to
    back between two timestamps (ranks start each round together), divided by `calls`; one value
    per round."""
    loops = per_rank_times(lambda: [fn() for _ in range(calls)], device, rounds)
    return [[ms / calls for ms in rank_times] for rank_times in loops]


def slowest(per_rank: list[list[float]]) -> list[float]:
    """Per call, the time of the slowest rank (a collective is as fast as its last rank)."""
    return [max(col) for col in zip(*per_rank, strict=True)]
