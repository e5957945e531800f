"""What the step model (predict/model.py) needs of a model: its depth, the parameters of a decoder
layer (those of its matrix products, and the rest) and of the root, and the forward FLOPs a token
costs in a layer (the attention's part of them too) and in the head, at one sequence length.

A GPT LM preset's come from its config, counted as core/flops.py counts them. Any other model's
parameters are counted on the meta device, its blocks found as `shard` finds them; its FLOPs are
its calibration record's, counted by PyTorch's flop counter (workloads/sharded_source.py, the
attention whole): the head's are its output matrix's two FLOPs a weight and token, a layer's are
the rest over the layers, and a layer's attention is what its FLOPs exceed twice its matrix
products' parameters by.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from trainperf.core.errors import SpecError
from trainperf.core.flops import transformer_flops
from trainperf.models.source import ModelSource, find_blocks, is_model_source
from trainperf.workloads.sharded import ShardSpec

NORMS_PER_LAYER = 2  # the GPT LM's layer: q, k, v, o, three MLP matrices and two norms
MATRICES_PER_LAYER = 7


@dataclass(frozen=True)
class Parameters:
    """A model's parameters as the step model splits them."""

    n_layers: int
    layer_matmul: int  # one layer's, in its matrix products
    layer_other: int  # one layer's others (norms, biases)
    root: int  # outside the layers: embeddings, head, final norm (a tied head once)
    tensors: int  # parameter tensors: what DDP all-reduces one by one without buckets
    head: int  # the output matrix's weights (2 FLOPs each a token, tied or not)

    @property
    def total(self) -> int:
        return self.n_layers * (self.layer_matmul + self.layer_other) + self.root


@dataclass(frozen=True)
class Shape:
    """A model's Parameters and its forward FLOPs per token at one sequence length."""

    params: Parameters
    layer_forward: float  # a layer's forward FLOPs a token, attention included
    layer_attention: float  # of which the attention's
    head_forward: float


def preset_parameters(spec: ShardSpec) -> Parameters:
    cfg = spec.model_config()
    d = cfg.d_model
    tensors = (MATRICES_PER_LAYER + NORMS_PER_LAYER) * cfg.n_layers + 3  # and embeddings, head, final norm
    return Parameters(cfg.n_layers, cfg.layer_matmul_params, NORMS_PER_LAYER * d,
                      2 * cfg.vocab_size * d + d, tensors, cfg.vocab_size * d)


@functools.lru_cache(maxsize=16)
def counted_parameters(model: str, layers: int | None = None, blocks: str | None = None) -> Parameters:
    """The Parameters of a model not a preset, built on the meta device (nothing allocated)."""
    built = ModelSource(model, layers).build(torch.device("meta"))
    found = find_blocks(built, blocks)
    if found is None:
        raise SpecError(f"--model {model}: no repeated blocks found; name them with --blocks")
    block = found.layers[0]
    matmul = sum(m.weight.numel() for m in block.modules() if isinstance(m, nn.Linear))
    in_layer = sum(p.numel() for p in block.parameters())
    params = list(built.parameters())
    total = sum(p.numel() for p in params)
    return Parameters(len(found.layers), matmul, in_layer - matmul, total - len(found.layers) * in_layer,
                      len(params), _head_weights(built, found.layers))


def _head_weights(model: nn.Module, layers: nn.ModuleList) -> int:
    """The output matrix's size: transformers' output embeddings, else the largest Linear outside
    the layers, else (a head tied by hand) the largest embedding."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        return head.weight.numel()
    inside = {id(m) for m in layers.modules()}
    outside = [m for m in model.modules() if id(m) not in inside]
    for kind in (nn.Linear, nn.Embedding):
        sizes = [m.weight.numel() for m in outside if isinstance(m, kind)]
        if sizes:
            return max(sizes)
    return 0


def parameters_of(spec: ShardSpec) -> Parameters:
    if is_model_source(spec.model):
        return counted_parameters(spec.model, spec.layers, spec.blocks)
    return preset_parameters(spec)


def shape_of(spec: ShardSpec, counted: tuple[float, ShardSpec] | None = None) -> Shape:
    """The Shape of `spec`'s model. A model not a preset takes its FLOPs from `counted`: a
    forward's FLOPs per token and the spec they were counted on (its calibration's)."""
    params = parameters_of(spec)
    if not is_model_source(spec.model):
        attention = transformer_flops(0, 1, spec.model_config().d_model, spec.seq, 1, mode="forward")
        return Shape(params, 2.0 * params.layer_matmul + attention, attention, 2.0 * params.head)
    if counted is None:
        raise SpecError(f"{spec.model}: its FLOPs come from a calibration record with counted FLOPs "
                        "(a one-GPU `trainperf shard` row of it)")
    per_token, on = counted
    layer = (per_token - 2.0 * params.head) / parameters_of(on).n_layers
    return Shape(params, layer, max(layer - 2.0 * params.layer_matmul, 0.0), 2.0 * params.head)
