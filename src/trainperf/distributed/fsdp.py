"""FSDP2's API (fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy), wherever this torch keeps it."""

from __future__ import annotations

from types import ModuleType


def fsdp2() -> ModuleType:
    """`torch.distributed.fsdp` (torch ≥ 2.6), else `torch.distributed._composable.fsdp`."""
    try:
        from torch.distributed import fsdp

        fsdp.fully_shard  # noqa: B018 - present from torch 2.6
    except (ImportError, AttributeError):
        from torch.distributed._composable import fsdp
    return fsdp
