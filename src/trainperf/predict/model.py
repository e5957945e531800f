"""A sharded step on N GPUs predicted from one GPU's step of the same model and choices.

A rank's compute is the calibration's time per FLOP times the FLOPs of its share of the batch,
split over the decoder units and the root by their FLOPs (the checkpointed layers' forward counted
again in their backward; predict/shape.py has a model's parameters and FLOPs); its collectives
are the bytes FSDP2 (or DDP) moves per unit at the bus bandwidth the links give for that size and
rank count (predict/links.py); predict/schedule.py orders them. Memory per rank: the state over
the shards, plus the calibration's activations scaled by the activations the policy keeps
(workloads/sharded.memory_needed; of a model not a preset, by the tokens a rank trains, the policy
being the calibration's), plus two gathered units.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainperf.core.errors import SpecError
from trainperf.core.flops import PASSES, peak_tflops
from trainperf.models.source import is_model_source
from trainperf.predict.links import Links
from trainperf.predict.schedule import Timeline, Unit, replicated_step, sharded_step, with_contention
from trainperf.predict.shape import Shape, shape_of
from trainperf.workloads.sharded import (
    STATE_BYTES_PER_PARAM,
    ShardSpec,
    keeps_attention,
    memory_needed,
    whole_layers,
)

DDP_BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's bucket_cap_mb
GATHERED_UNITS = 2  # units FSDP2 holds unsharded at once: the one computing and the one prefetched


@dataclass(frozen=True)
class Calibration:
    """One GPU's measured step of the model (or of its first `spec.layers` layers)."""

    spec: ShardSpec
    forward_backward_ms: float
    optimizer_ms: float
    gpu: str
    source: str  # which record
    peak_mem_gb: float | None = None
    gpu_memory_gb: float | None = None  # the GPU's memory, GiB
    forward_flops_per_token: float | None = None  # counted, of a model not a preset (predict/shape.py)

    def shape(self, spec: ShardSpec) -> Shape:
        """The Shape of `spec`'s model, its FLOPs counted as this calibration's were."""
        counted = None if self.forward_flops_per_token is None else (self.forward_flops_per_token, self.spec)
        return shape_of(spec, counted)


@dataclass(frozen=True)
class Prediction:
    spec: ShardSpec
    timeline: Timeline
    tokens_per_s_per_gpu: float
    mfu: float | None
    mem_gb_per_rank: float | None
    fits: bool | None  # whether mem_gb_per_rank is within the GPU's memory
    inputs: str


def rank_tokens(spec: ShardSpec) -> int:
    return spec.batch // spec.world_size * spec.seq


def work(spec: ShardSpec, shape: Shape) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """(forward, backward) FLOPs of each decoder layer and of the root, on one rank's tokens."""
    tokens = rank_tokens(spec)
    forward = shape.layer_forward * tokens
    redone = forward - (shape.layer_attention * tokens if keeps_attention(spec.checkpoint) else 0.0)
    n = shape.params.n_layers
    whole = set(whole_layers(spec.checkpoint, n) or ())
    layers = [(forward, 2 * forward + (redone if i in whole else 0.0)) for i in range(n)]
    head = shape.head_forward * tokens
    return layers, (head, 2 * head)


def model_flops(spec: ShardSpec, shape: Shape) -> float:
    """The step's FLOPs on one rank without what checkpointing recomputes (what MFU counts)."""
    layers, root = work(spec, shape)
    return sum(PASSES["train"] * f for f, _ in layers) + sum(root)


def ms_per_flop(cal: Calibration) -> float:
    layers, root = work(cal.spec, cal.shape(cal.spec))
    return cal.forward_backward_ms / (sum(f + b for f, b in layers) + sum(root))


def shard_group(spec: ShardSpec, gpus_per_node: int) -> int:
    """Ranks one copy of the parameters is sharded over: all (full), a node or, on one node, half of
    them (hybrid, as workloads/sharded.hybrid_groups), none (replicated)."""
    if spec.shard == "full":
        return spec.world_size
    if spec.shard == "hybrid":
        return gpus_per_node if spec.world_size > gpus_per_node else max(spec.world_size // 2, 1)
    return 1


def _bytes(spec: ShardSpec) -> tuple[int, int]:
    """(bytes per matrix-product parameter gathered, bytes per gradient reduced)."""
    gather = 4 if spec.dtype == "fp32" else (1 if spec.float8 == "torchao" else 2)
    reduce = 4 if spec.dtype == "fp32" or spec.reduce_dtype == "fp32" else 2
    return gather, reduce


def _sharded_units(spec: ShardSpec, shape: Shape, links: Links, scale: float) -> tuple[Unit, list[Unit]]:
    layers, (head_f, head_b) = work(spec, shape)
    matmul, others = shape.params.layer_matmul, shape.params.layer_other
    gather_b, reduce_b = _bytes(spec)
    group = shard_group(spec, links.gpus_per_node)
    replicas = spec.world_size // group

    def collectives(params: int, gathered_bytes: float) -> tuple[float, float]:
        gather = links.collective_ms("all_gather", gathered_bytes, group)
        reduce = links.collective_ms("reduce_scatter", params * reduce_b, group)
        if replicas > 1:
            across = replicas if spec.world_size > links.gpus_per_node else 1
            reduce += links.collective_ms("all_reduce", params * reduce_b / group, replicas, nodes=across)
        return gather, reduce

    units = []
    for i in range(0, len(layers), spec.unit_layers):
        chunk = layers[i:i + spec.unit_layers]
        n = len(chunk)
        gather, reduce = collectives(n * (matmul + others), n * (matmul * gather_b + others * 2))
        units.append(Unit(sum(f for f, _ in chunk) * scale, sum(b for _, b in chunk) * scale, gather, reduce))
    root = shape.params.root
    gather, reduce = collectives(root, root * 2)
    return Unit(head_f * scale, head_b * scale, gather, reduce), units


def predict_sharded(spec: ShardSpec, cal: Calibration, links: Links, contention: float = 0.0) -> Prediction:
    """The step of `spec` on its world size from `cal` (module doc)."""
    if cal.spec.model != spec.model or cal.spec.seq != spec.seq:
        raise SpecError(f"calibration {cal.spec.label()} is not of {spec.model} at sequence {spec.seq}")
    scale = ms_per_flop(cal)
    shape, theirs = cal.shape(spec), cal.shape(cal.spec)
    group = shard_group(spec, links.gpus_per_node)
    optimizer = cal.optimizer_ms * shape.params.total / theirs.params.total / group
    if spec.shard == "none":
        layers, root = work(spec, shape)
        forward = (sum(f for f, _ in layers) + root[0]) * scale
        backward = (sum(b for _, b in layers) + root[1]) * scale
        grads = shape.params.total * _bytes(spec)[1]
        whole, last = divmod(grads, DDP_BUCKET_BYTES)
        buckets = [links.collective_ms("all_reduce", DDP_BUCKET_BYTES, spec.world_size)] * int(whole)
        buckets += [links.collective_ms("all_reduce", last, spec.world_size)] if last else []
        timeline = replicated_step(forward, backward, buckets, optimizer)
    else:
        root, units = _sharded_units(spec, shape, links, scale)
        timeline = sharded_step(root, units, optimizer, spec.reshard_after_forward, max(spec.prefetch, 1))
    timeline = with_contention(timeline, contention)
    peak = peak_tflops(cal.gpu, spec.dtype)
    tflops = model_flops(spec, shape) / (timeline.step_ms / 1e3) / 1e12
    inputs = f"compute: {cal.source}; links: {links.source}"
    if spec.world_size > links.gpus_per_node:
        inputs += f"; between nodes {links.network()}"
    memory = memory_gb(spec, cal, group, shape, theirs)
    fits = None if memory is None or cal.gpu_memory_gb is None else memory <= cal.gpu_memory_gb
    return Prediction(spec, timeline, rank_tokens(spec) / (timeline.step_ms / 1e3),
                      tflops / peak if peak else None, memory, fits, inputs)


def memory_gb(spec: ShardSpec, cal: Calibration, group: int, shape: Shape, theirs: Shape) -> float | None:
    """Peak GB per rank (module doc); None without the calibration's peak."""
    if cal.peak_mem_gb is None:
        return None
    measured_rest = cal.peak_mem_gb * 2**30 - theirs.params.total * STATE_BYTES_PER_PARAM
    if is_model_source(spec.model):
        kept = rank_tokens(spec) / rank_tokens(cal.spec)
    else:
        def activations(s: ShardSpec) -> float:
            need = memory_needed(s)
            return need["activations"] + need["logits"]

        one_gpu = replace(cal.spec, world_size=1, batch=rank_tokens(cal.spec) // cal.spec.seq)
        kept = activations(spec) / max(activations(one_gpu), 1.0)
    layer = shape.params.layer_matmul + shape.params.layer_other
    gathered = 0.0 if group == 1 else GATHERED_UNITS * spec.unit_layers * layer * 2
    state = shape.params.total * STATE_BYTES_PER_PARAM / group
    return (state + max(measured_rest, 0.0) * kept + gathered) / 2**30
