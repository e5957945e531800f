"""One rank's training step as a schedule: a compute stream and the collectives' streams, each in
order, every collective waiting for what it needs and every computation for the collective that
feeds it. What comes out is the step and its exposed communication (the time the compute stream
waits), the quantities `shard` and `ddp` measure from kernel traces.

Sharded (FSDP2): the root's parameters (embeddings, final norm, LM head) are gathered first and kept;
each unit's all-gather runs on one stream, issued `prefetch` units ahead of the computation (FSDP2's
implicit prefetching is one); in the backward a resharded unit is gathered again; each unit's
gradients are reduced on a second stream as soon as its backward ends, the root's last.
Replicated (DDP): the gradients leave in buckets as the backward produces them, evenly over its
time, one all-reduce after another; without overlap all of them after the backward.
Neither schedule knows of the host: a step whose host issues work later than the GPU could run it
is slower than its schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Unit:
    """One FSDP2 unit's work on one rank, in ms."""

    forward_ms: float
    backward_ms: float
    gather_ms: float = 0.0  # all-gather of its parameters
    reduce_ms: float = 0.0  # its gradients' reduce-scatter (and, hybrid, the all-reduce across replicas)


@dataclass(frozen=True)
class Timeline:
    step_ms: float
    compute_ms: float  # forward, backward and optimizer, back to back
    comm_ms: float  # every collective's time, hidden or not
    exposed_comm_ms: float  # the time the compute stream waits for a collective

    @property
    def hidden_comm_ms(self) -> float:
        return self.comm_ms - self.exposed_comm_ms


def sharded_step(root: Unit, units: Sequence[Unit], optimizer_ms: float = 0.0,
                 reshard_after_forward: bool = True, prefetch: int = 1) -> Timeline:
    """The FSDP2 schedule (module doc). The last unit is never resharded: its backward follows its
    forward at once. `root` computes the LM head and loss after the last unit."""
    if prefetch < 1:
        raise ValueError(f"prefetch must be at least 1, got {prefetch}")
    gathered = root.gather_ms  # the gather stream is free from here
    comm = root.gather_ms + root.reduce_ms
    now = gathered
    starts: list[float] = []
    for i, unit in enumerate(units):
        issue = starts[i - prefetch] if i >= prefetch else 0.0
        gathered = max(gathered, issue) + unit.gather_ms
        starts.append(max(now, gathered))
        now = starts[-1] + unit.forward_ms
        comm += unit.gather_ms + unit.reduce_ms
    now += root.forward_ms + root.backward_ms
    backward_from = now
    reduced = 0.0
    back_starts: dict[int, float] = {}
    last = len(units) - 1
    for i in range(last, -1, -1):
        unit = units[i]
        start = now
        if reshard_after_forward and i != last:
            issue = back_starts.get(i + prefetch, backward_from)
            gathered = max(gathered, issue) + unit.gather_ms
            comm += unit.gather_ms
            start = max(now, gathered)
        back_starts[i] = start
        now = start + unit.backward_ms
        reduced = max(reduced, now) + unit.reduce_ms
    reduced = max(reduced, now) + root.reduce_ms
    compute = sum(u.forward_ms + u.backward_ms for u in (root, *units)) + optimizer_ms
    step = max(now, reduced) + optimizer_ms
    return Timeline(step, compute, comm, max(step - compute, 0.0))  # not below 0 by rounding


def replicated_step(forward_ms: float, backward_ms: float, buckets_ms: Sequence[float],
                    optimizer_ms: float = 0.0, overlap: bool = True) -> Timeline:
    """The data-parallel schedule (module doc): bucket k of K is ready (k+1)/K into the backward."""
    ready_from = forward_ms if overlap else forward_ms + backward_ms
    spread = backward_ms if overlap else 0.0
    done = 0.0
    for k, ms in enumerate(buckets_ms):
        done = max(done, ready_from + spread * (k + 1) / len(buckets_ms)) + ms
    compute = forward_ms + backward_ms + optimizer_ms
    step = max(forward_ms + backward_ms, done) + optimizer_ms
    return Timeline(step, compute, sum(buckets_ms), max(step - compute, 0.0))


def with_contention(timeline: Timeline, slowdown: float) -> Timeline:
    """The step when each ms of hidden communication costs the compute beside it `slowdown` ms
    (NCCL's kernels take SMs and memory bandwidth from the computation they overlap)."""
    extra = slowdown * timeline.hidden_comm_ms
    return replace(timeline, step_ms=timeline.step_ms + extra, compute_ms=timeline.compute_ms + extra)
