"""ZeRO-1: optimizer state partitioned across ranks, parameters broadcast after each step.

Each parameter is owned by one rank (greedy by size, so the shards hold about equal numbers of
elements); a rank keeps optimizer state only for what it owns and updates only that. After the
step every owner broadcasts its parameters, flattened into one buffer per owner. Gradients must
already be averaged over ranks (any data-parallel variant does that). Works with any
torch.optim optimizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors

from trainperf.distributed.grad_sync import copy_from_flat


class ShardedOptimizer:
    def __init__(self, params: Any, make: Callable[..., torch.optim.Optimizer], **kwargs: Any) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.rank, world = dist.get_rank(), dist.get_world_size()
        load = [0] * world
        self.owner: dict[int, int] = {}
        for p in sorted(self.params, key=lambda p: -p.numel()):
            r = load.index(min(load))
            self.owner[id(p)] = r
            load[r] += p.numel()
        self.by_owner = [[p for p in self.params if self.owner[id(p)] == r] for r in range(world)]
        mine = self.by_owner[self.rank]
        self.local = make(mine, **kwargs) if mine else None

    def step(self) -> None:
        if self.local is not None:
            self.local.step()
        with torch.no_grad():
            for r, owned in enumerate(self.by_owner):
                if not owned:
                    continue
                flat = _flatten_dense_tensors([p.data for p in owned])
                dist.broadcast(flat, src=r)
                if r != self.rank:
                    copy_from_flat([p.data for p in owned], flat)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds."""
        return optimizer_state_bytes(self.local) if self.local is not None else 0


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state held by this process (the local shard of a DTensor)."""
    local = [getattr(t, "to_local", lambda t=t: t)() for state in opt.state.values()
             for t in state.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in local)
