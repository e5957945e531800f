"""Gradient synchronisation for data parallelism, four ways, to see what overlap buys.

Each variant leaves every parameter's .grad equal to the mean over ranks as each backward ends
(outside `no_sync()`), however the training loop zeroes its gradients:
  naive     one blocking all-reduce per parameter after backward
  flat      one all-reduce of all gradients flattened into one buffer
  overlap   an async all-reduce per parameter, launched from its grad hook during backward
  bucketed  gradients grouped into buckets of ~bucket_mb (in reverse registration order, the
            order backward produces them); each bucket is all-reduced asynchronously as soon as
            its last gradient is ready. As in PyTorch DDP with `gradient_as_bucket_view`, each
            bucket is one persistent buffer and the gradients are views into it, so backward
            accumulates straight into the bucket: no copy in, no copy out, no allocation per step
            when the loop zeroes through `zero_grad(opt)`.
The mean is NCCL's own average (ReduceOp.AVG) where the backend has one, else a sum and a
division. Ranks must agree on which parameters get a gradient in a step (as DDP without
find_unused_parameters); one no rank's backward reaches keeps the .grad the loop left it.
`finish()` before the optimizer step refuses gradients that were never averaged.
`reduce_dtype` (bf16) sends the gradients in that dtype: each buffer is cast into a copy that
the all-reduce averages, and the mean is written back into the fp32 gradients, as PyTorch DDP's
bf16_compress_hook does; half the bytes of fp32 on the wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.autograd import Variable


def _params(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def copy_from_flat(tensors: list[torch.Tensor], flat: torch.Tensor) -> None:
    """Write a buffer made by `_flatten_dense_tensors(tensors)` back into those tensors."""
    for t, part in zip(tensors, _unflatten_dense_tensors(flat, tensors), strict=True):
        t.copy_(part)


class Reduction:
    """An all-reduce in flight over `wire` (the tensor itself, or its copy in the reduce dtype);
    `wait()` ends it and writes the result back into `tensor`."""

    def __init__(self, work: dist.Work | None, wire: torch.Tensor, tensor: torch.Tensor) -> None:
        self.work, self.wire, self.tensor = work, wire, tensor

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()
        if self.wire is not self.tensor:
            self.tensor.copy_(self.wire)


class GradSync:
    """No synchronisation: the compute-only baseline (and the base of the variants).

    A variant that `syncs` hooks every parameter; the first gradient of a backward queues a
    callback for that backward's end, where `average()` leaves each gradient the mean over ranks
    (as PyTorch DDP's reducer finalises). So the mean is taken whatever the loop does between
    steps, and accumulating micro-batches stays right: each backward adds its local gradient to
    means already equal on every rank. Inside `no_sync()` gradients accumulate locally only."""

    syncs = False

    def __init__(self, model: nn.Module, reduce_dtype: torch.dtype | None = None) -> None:
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in named]
        self.names = {id(p): name for name, p in named}
        self.world = dist.get_world_size()
        self.averages = dist.get_backend() == "nccl"  # NCCL averages itself; gloo sums
        self.reduce_dtype = reduce_dtype  # None: the gradients' own
        self.syncing = True  # False inside no_sync()
        self.unsynced = False  # a backward inside no_sync() ran since the last averaged one
        self.end_queued = False
        self.hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in self.params] \
            if self.syncs else []

    def _grad_ready(self, p: nn.Parameter) -> None:
        if not self.syncing:
            self.unsynced = True
            self.held_back(p)
            return
        if not self.end_queued:
            self.end_queued = True
            Variable._execution_engine.queue_callback(self._backward_ended)
        self.ready(p)

    def _backward_ended(self) -> None:
        self.end_queued = False
        self.unsynced = False
        self.average()

    def held_back(self, p: nn.Parameter) -> None:
        """A gradient accumulated inside no_sync(): it joins the next averaged backward's mean."""

    def ready(self, p: nn.Parameter) -> None:
        """A gradient accumulated in a backward outside no_sync()."""

    def average(self) -> None:
        """At the end of a backward outside no_sync(): every gradient the mean over ranks."""

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backwards inside accumulate locally, with no communication (as DDP's no_sync); the
        next backward outside averages everything accumulated."""
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True

    def close(self) -> None:
        """Remove the hooks: a parameter's hook holds this object, which holds the parameters, and
        the garbage collector does not see through the hook, so without this every case that used
        hooks would keep its model alive."""
        for handle in self.hooks:
            handle.remove()
        self.hooks.clear()

    def mean(self, t: torch.Tensor, async_op: bool = False) -> Reduction | None:
        """All-reduce `t` into its mean over ranks, in the reduce dtype (async: the write back
        and the division follow `wait`)."""
        op = dist.ReduceOp.AVG if self.averages else dist.ReduceOp.SUM
        wire = t if self.reduce_dtype in (None, t.dtype) else t.to(self.reduce_dtype)
        reduction = Reduction(dist.all_reduce(wire, op=op, async_op=async_op), wire, t)
        if async_op:
            return reduction
        reduction.wait()
        return None

    def divided(self, t: torch.Tensor) -> None:
        """After a sum: the mean."""
        if not self.averages:
            t.div_(self.world)

    def kept(self, p: nn.Parameter, averaged: torch.Tensor) -> None:
        """Refuse a gradient replaced while its mean was in flight: the mean went elsewhere."""
        if p.grad is not averaged:
            raise RuntimeError(
                f"the gradient of {self.names[id(p)]} was replaced while it was being averaged over "
                "ranks (code that sets .grad during backward): change it in place, or after backward")

    def finish(self) -> None:
        """Before the optimizer step: refuse gradients that were never averaged."""
        if self.unsynced:
            raise RuntimeError(
                "the last backward ran inside no_sync(), so the gradients are this rank's alone: run "
                "the last micro-batch's backward outside no_sync() before the optimizer step")

    def zero_grad(self, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=True)


class NaiveSync(GradSync):
    syncs = True

    def average(self) -> None:
        for p in self.params:
            if p.grad is not None:
                self.mean(p.grad)
                self.divided(p.grad)


class FlatSync(GradSync):
    syncs = True

    def average(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        flat = _flatten_dense_tensors(grads)
        self.mean(flat)
        self.divided(flat)
        copy_from_flat(grads, flat)


class OverlapSync(GradSync):
    syncs = True

    def __init__(self, model: nn.Module, reduce_dtype: torch.dtype | None = None) -> None:
        super().__init__(model, reduce_dtype)
        self.pending: dict[int, tuple[nn.Parameter, Reduction]] = {}
        self.held: dict[int, nn.Parameter] = {}

    def held_back(self, p: nn.Parameter) -> None:
        self.held[id(p)] = p

    def ready(self, p: nn.Parameter) -> None:
        self.pending[id(p)] = p, self.mean(p.grad, async_op=True)

    def average(self) -> None:
        for key, p in self.held.items():  # accumulated inside no_sync(), untouched since
            if key not in self.pending:
                self.pending[key] = p, self.mean(p.grad, async_op=True)
        self.held.clear()
        for p, reduction in self.pending.values():
            reduction.wait()
            self.kept(p, reduction.tensor)
            self.divided(reduction.tensor)
        self.pending.clear()


class BucketedSync(GradSync):
    """Gradients as views into persistent buckets. A loop that sets gradients to None (PyTorch's
    `optimizer.zero_grad()`) gets a fresh gradient from autograd, which is copied into its bucket
    and made a view again; zeroing through `zero_grad(opt)` keeps the views and copies nothing."""

    syncs = True

    def __init__(self, model: nn.Module, bucket_mb: float, reduce_dtype: torch.dtype | None = None) -> None:
        super().__init__(model, reduce_dtype)
        self.buckets = partition_buckets(self.params, bucket_mb)
        self.bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.flats = [torch.zeros(sum(p.numel() for p in b), dtype=b[0].dtype, device=b[0].device)
                      for b in self.buckets]
        self.views = {id(p): view.view_as(p) for b, flat in zip(self.buckets, self.flats, strict=True)
                      for p, view in zip(b, flat.split([p.numel() for p in b]), strict=True)}
        self.arrived: list[set[int]] = [set() for _ in self.buckets]
        self.pending: dict[int, Reduction] = {}
        self.cleared: set[int] = set()  # zeroed by zero_grad(opt) and given no gradient since
        self.zero_grad(None)

    def adopt(self, p: nn.Parameter) -> None:
        """Make p's gradient its bucket's view again."""
        view = self.views[id(p)]
        if p.grad is not view:
            view.copy_(p.grad)
            p.grad = view
        self.cleared.discard(id(p))

    def held_back(self, p: nn.Parameter) -> None:
        self.adopt(p)

    def ready(self, p: nn.Parameter) -> None:
        self.adopt(p)
        i = self.bucket_of[id(p)]
        self.arrived[i].add(id(p))
        if len(self.arrived[i]) == len(self.buckets[i]):
            self.pending[i] = self.mean(self.flats[i], async_op=True)

    def average(self) -> None:
        for i, bucket in enumerate(self.buckets):
            if i in self.pending:
                continue
            for p in bucket:  # no gradient in this step: its slot may hold an earlier step's
                if p.grad is None:
                    self.views[id(p)].zero_()
            self.pending[i] = self.mean(self.flats[i], async_op=True)
        for i, reduction in sorted(self.pending.items()):
            reduction.wait()
            self.divided(self.flats[i])
            for p in self.buckets[i]:
                if id(p) in self.arrived[i]:
                    self.kept(p, self.views[id(p)])
        for p in self.params:  # as optimizer.zero_grad() leaves a parameter no backward reached
            if id(p) in self.cleared:
                p.grad = None
        self.pending.clear()
        self.arrived = [set() for _ in self.buckets]

    def zero_grad(self, opt: torch.optim.Optimizer | None) -> None:
        """Zero the buckets and keep every gradient a view into its bucket."""
        for flat in self.flats:
            flat.zero_()
        for p in self.params:
            p.grad = self.views[id(p)]
        self.cleared = {id(p) for p in self.params}


def _nbytes(p: nn.Parameter) -> int:
    return p.numel() * p.element_size()


def partition_buckets(params: list[nn.Parameter], bucket_mb: float) -> list[list[nn.Parameter]]:
    """Parameters in reverse order (the order backward produces gradients), in buckets of at most
    bucket_mb (a parameter larger than that gets a bucket of its own)."""
    cap, buckets, size = bucket_mb * 2**20, [[]], 0
    for p in reversed(params):
        if buckets[-1] and size + _nbytes(p) > cap:
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += _nbytes(p)
    return buckets


def bucket_sizes_bytes(model: nn.Module, bucket_mb: float) -> list[int]:
    """The byte size of each gradient bucket the bucketed variant would form."""
    return [sum(_nbytes(p) for p in b) for b in partition_buckets(_params(model), bucket_mb)]
