"""Gradient synchronisation for data parallelism, four ways, to see what overlap buys.

Each variant leaves every parameter's .grad equal to the mean over ranks once `finish()`
returns:
  naive     one blocking all-reduce per parameter after backward
  flat      one all-reduce of all gradients flattened into one buffer
  overlap   an async all-reduce per parameter, launched from its grad hook during backward
  bucketed  gradients grouped into buckets of ~bucket_mb (in reverse registration order, the
            order backward produces them); each bucket is all-reduced asynchronously as soon as
            its last gradient is ready. As in PyTorch DDP with `gradient_as_bucket_view`, each
            bucket is one persistent buffer and the gradients are views into it, so backward
            accumulates straight into the bucket: no copy in, no copy out, no allocation per step.
The mean is NCCL's own average (ReduceOp.AVG) where the backend has one, else a sum and a
division. `zero_grad()` replaces the optimizer's: a bucketed gradient must stay a view.
`reduce_dtype` (bf16) sends the gradients in that dtype: each buffer is cast into a copy that
the all-reduce averages, and the mean is written back into the fp32 gradients, as PyTorch DDP's
bf16_compress_hook does; half the bytes of fp32 on the wire.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


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
    """No synchronisation: the compute-only baseline (and the base of the variants)."""

    def __init__(self, model: nn.Module, reduce_dtype: torch.dtype | None = None) -> None:
        self.params = _params(model)
        self.world = dist.get_world_size()
        self.averages = dist.get_backend() == "nccl"  # NCCL averages itself; gloo sums
        self.reduce_dtype = reduce_dtype  # None: the gradients' own
        self.hooks: list[torch.utils.hooks.RemovableHandle] = []

    def hook(self, fn) -> None:  # noqa: ANN001 - called with each parameter once its gradient is ready
        self.hooks += [p.register_post_accumulate_grad_hook(fn) for p in self.params]

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

    def finish(self) -> None:
        """Called after backward: make the gradients the mean over ranks."""

    def zero_grad(self, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=True)


class NaiveSync(GradSync):
    def finish(self) -> None:
        for p in self.params:
            self.mean(p.grad)
            self.divided(p.grad)


class FlatSync(GradSync):
    def finish(self) -> None:
        grads = [p.grad for p in self.params]
        flat = _flatten_dense_tensors(grads)
        self.mean(flat)
        self.divided(flat)
        copy_from_flat(grads, flat)


class OverlapSync(GradSync):
    def __init__(self, model: nn.Module, reduce_dtype: torch.dtype | None = None) -> None:
        super().__init__(model, reduce_dtype)
        self.pending: list[Reduction] = []
        self.hook(self._launch)

    def _launch(self, p: nn.Parameter) -> None:
        self.pending.append(self.mean(p.grad, async_op=True))

    def finish(self) -> None:
        for reduction in self.pending:
            reduction.wait()
            self.divided(reduction.tensor)
        self.pending.clear()


class BucketedSync(GradSync):
    def __init__(self, model: nn.Module, bucket_mb: float, reduce_dtype: torch.dtype | None = None) -> None:
        super().__init__(model, reduce_dtype)
        self.buckets = partition_buckets(self.params, bucket_mb)
        self.bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.flats = [torch.zeros(sum(p.numel() for p in b), dtype=b[0].dtype, device=b[0].device)
                      for b in self.buckets]
        self.views = {id(p): view.view_as(p) for b, flat in zip(self.buckets, self.flats, strict=True)
                      for p, view in zip(b, flat.split([p.numel() for p in b]), strict=True)}
        self.ready = [0] * len(self.buckets)
        self.pending: dict[int, Reduction] = {}
        for p in self.params:
            p.grad = self.views[id(p)]
        self.hook(self._mark_ready)

    def _mark_ready(self, p: nn.Parameter) -> None:
        i = self.bucket_of[id(p)]
        self.ready[i] += 1
        if self.ready[i] == len(self.buckets[i]):
            self.pending[i] = self.mean(self.flats[i], async_op=True)

    def finish(self) -> None:
        for i in range(len(self.buckets)):
            if i not in self.pending:  # a bucket whose gradients never all arrived (still zeros)
                self.pending[i] = self.mean(self.flats[i], async_op=True)
        for i, work in sorted(self.pending.items()):
            work.wait()
            self.divided(self.flats[i])
        self.pending.clear()
        self.ready = [0] * len(self.buckets)

    def zero_grad(self, opt: torch.optim.Optimizer) -> None:
        """Zero the buckets and keep every gradient a view into its bucket."""
        for flat in self.flats:
            flat.zero_()
        for p in self.params:
            if p.grad is None or p.grad.data_ptr() != self.views[id(p)].data_ptr():
                p.grad = self.views[id(p)]


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
