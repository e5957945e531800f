"""FSDP2 (fully_shard) for a decoder: each layer, then the root, with the knobs that decide how
much of its communication the computation hides; used alike by `shard` and `ddp`'s fsdp2 variant.

  reshard_after_forward  free each layer's gathered parameters after its forward (the backward
                         gathers them again) — the last layer never does, as torchtitan has it:
                         its backward comes right after its forward
  prefetch               0: FSDP2's implicit prefetching (one all-gather ahead, issued when the
                         layer before starts); k > 0: each unit names the next k units to gather
                         in the forward and the k before it in the backward, explicitly
  unit_layers            decoder layers FSDP2 gathers and reduces as one unit (one all-gather and
                         one reduce-scatter for all of them): FSDP2's hooks cost the host about a
                         millisecond a unit, as much as a small layer's forward on the GPU, so with
                         one layer a unit the host falls behind and each gather is issued late
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from torch import nn

from trainperf.core.errors import Unsupported


def fsdp2() -> ModuleType:
    """`torch.distributed.fsdp` (torch ≥ 2.6), else `torch.distributed._composable.fsdp`."""
    try:
        from torch.distributed import fsdp

        fsdp.fully_shard  # noqa: B018 - present from torch 2.6
    except (ImportError, AttributeError):
        from torch.distributed._composable import fsdp
    return fsdp


def shard_decoder(root: nn.Module, layers: Sequence[nn.Module], reshard_after_forward: bool = True,
                  prefetch: int = 0, unit_layers: int = 1, **policy: Any) -> nn.Module:
    """Shard `layers`, `unit_layers` consecutive ones a unit, then `root` (the rest: embeddings,
    final norm, LM head), with FSDP2's `policy` keywords (mesh, mp_policy, offload_policy)."""
    fsdp = fsdp2()
    units = [list(layers[i:i + unit_layers]) for i in range(0, len(layers), unit_layers)]
    last = len(units) - 1
    for i, unit in enumerate(units):
        try:
            fsdp.fully_shard(unit if len(unit) > 1 else unit[0],
                             reshard_after_forward=reshard_after_forward and i < last, **policy)
        except (TypeError, AttributeError) as exc:  # a list of modules: torch >= 2.6
            raise Unsupported(f"--unit-layers {unit_layers}: this torch's FSDP2 shards one module a unit "
                              f"({str(exc).splitlines()[0]})") from None
    fsdp.fully_shard(root, reshard_after_forward=False, **policy)  # its parameters: needed first in backward
    if prefetch:
        heads = [unit[0] for unit in units]  # a unit's modules share its FSDP2 state
        for i, head in enumerate(heads):
            head.set_modules_to_forward_prefetch(heads[i + 1:i + 1 + prefetch])
            head.set_modules_to_backward_prefetch(list(reversed(heads[max(i - prefetch, 0):i])))
    return root
