"""FSDP2 (fully_shard) for a decoder: each layer, then the root, with the knobs that decide how
much of its communication the computation hides; used alike by `shard` and `ddp`'s fsdp2 variant.

  reshard_after_forward  free each layer's gathered parameters after its forward (the backward
                         gathers them again) — the last layer never does, as torchtitan has it:
                         its backward comes right after its forward
  prefetch               0: FSDP2's implicit prefetching (one all-gather ahead, issued when the
                         layer before starts); k > 0: each layer names the next k layers to gather
                         in the forward and the k before it in the backward, explicitly
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from torch import nn


def fsdp2() -> ModuleType:
    """`torch.distributed.fsdp` (torch ≥ 2.6), else `torch.distributed._composable.fsdp`."""
    try:
        from torch.distributed import fsdp

        fsdp.fully_shard  # noqa: B018 - present from torch 2.6
    except (ImportError, AttributeError):
        from torch.distributed._composable import fsdp
    return fsdp


def shard_decoder(root: nn.Module, layers: Sequence[nn.Module], reshard_after_forward: bool = True,
                  prefetch: int = 0, **policy: Any) -> nn.Module:
    """Shard each of `layers`, then `root` (the rest: embeddings, final norm, LM head), with
    FSDP2's `policy` keywords (mesh, mp_policy, offload_policy)."""
    fsdp = fsdp2()
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        fsdp.fully_shard(layer, reshard_after_forward=reshard_after_forward and i < last, **policy)
    fsdp.fully_shard(root, reshard_after_forward=False, **policy)  # its parameters: needed first in backward
    if prefetch:
        for i, layer in enumerate(layers):
            layer.set_modules_to_forward_prefetch(list(layers[i + 1:i + 1 + prefetch]))
            layer.set_modules_to_backward_prefetch(list(reversed(layers[max(i - prefetch, 0):i])))
    return root
