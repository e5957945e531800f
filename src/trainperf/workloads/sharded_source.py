"""Any causal LM (models/source.py: hf:, a config.json or folder, py:) as `trainperf shard` trains
it: its repeated blocks are FSDP2's units and what checkpointing and compile act on, its logits go
through the next-token loss inside the root module (so the sharded root gathers the head for it;
`--loss chunked`: trainperf's chunked loss from the hidden states, where it computes the model's
own, models/head_loss.py),
and its FLOPs are counted by PyTorch's flop counter on one forward before sharding (× 3 for the
step, as 6·N·tokens counts a forward's 2·N·tokens three times)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainperf.core.errors import SpecError
from trainperf.core.flops import PASSES, counted_flops
from trainperf.models.head_loss import HeadLoss
from trainperf.models.lm import TransformerLM, lm_loss
from trainperf.models.source import Blocks, ModelSource, find_blocks, logits_of
from trainperf.workloads.precision import compile_regions

STATE_BYTES_PER_PARAM = 16  # fp32 weight, gradient and AdamW's two moments
# What the GPT LM presets take and another model does not: the option, and whether a spec gives it
PRESET_ONLY: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("--float8 trainperf", lambda s: s.float8 == "trainperf"),
    ("--attention", lambda s: s.attention != "sdpa"))


class SourceWithLoss(nn.Module):
    """A model and its next-token loss as one module: FSDP2's root, DDP's module. `loss` computes
    it from the token ids instead of the model's logits (chunked_head_loss's)."""

    def __init__(self, model: nn.Module, loss: HeadLoss | None = None) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.loss is not None:
            return self.loss(tokens, targets)
        return lm_loss(logits_of(self.model, tokens).float(), targets)


def source_model(source: ModelSource, blocks: str | None, device: torch.device) -> tuple[nn.Module, Blocks]:
    """The model of `source` on `device` and its repeated blocks; a SpecError where none are found,
    since they are what sharding splits into units."""
    name = source.name
    model = source.build(device)
    found = find_blocks(model, blocks)
    if found is None:
        raise SpecError(f"--model {name}: no repeated blocks found to shard unit by unit; name them "
                        "with --blocks (a ModuleList's path, e.g. model.layers)")
    return model, found


def compile_blocks(model: nn.Module, layers: nn.ModuleList) -> None:
    """Each block compiled: the GPT LM its own way (Dynamo's caches emptied first, models/lm.py),
    any other model by regions."""
    if isinstance(model, TransformerLM):
        model.compile_layers()
    else:
        compile_regions(layers)


def source_parameters(source: ModelSource) -> int:
    """The parameters of `source`'s model, counted on the meta device (nothing allocated)."""
    return sum(p.numel() for p in source.build(torch.device("meta")).parameters())


def train_flops(model: nn.Module, tokens: torch.Tensor) -> float:
    """FLOPs of one training step of `model` on `tokens`: its forward counted, times three."""
    with torch.no_grad():
        return PASSES["train"] * counted_flops(lambda: logits_of(model, tokens))


def refuse_preset_options(spec: Any) -> None:
    """SpecError naming the first option of a ShardSpec that acts on the GPT LM presets alone."""
    for option, given in PRESET_ONLY:
        if given(spec):
            raise SpecError(f"{option} acts on the GPT LM presets; --model {spec.model} trains as built")
