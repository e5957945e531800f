"""The full training step of the GPT-style LM across ranks (`trainperf shard`): forward, loss,
backward and AdamW, with the model sharded by PyTorch FSDP2 (`fully_shard`) or replicated.

The choices a user tunes are the spec's fields:
  shard       full (FSDP2 over every rank) | hybrid (HSDP: shards within a group of ranks, replicas
              across groups: the GPUs of one host, or half the ranks on a single host) | none
              (PyTorch DDP: every rank holds the whole model)
  checkpoint  none | full (every decoder layer recomputed in the backward) | every-K (every K-th
              layer) | all-but-N (every layer but the last N) | ops (selective: matrix products and
              attention saved, the rest recomputed); `+attn` after full, every-K or all-but-N keeps
              the attention's output in those layers: their backward recomputes all but the
              attention (its forward is a third of a long sequence's FLOPs, its output one width)
  dtype       bf16 (FSDP2 gathers and computes in bf16 and reduces gradients in fp32 over fp32
              master weights; DDP runs under autocast) | fp32
  reduce_dtype  the gradients on the wire: fp32 | bf16 (half the bytes: FSDP2's reduce-scatter in
              bf16, DDP's buckets through PyTorch's bf16 compression hook)
  optimizer   adamw | adamw-fused;  offload (FSDP2 keeps parameters and optimizer state on the
              CPU);  compile (each decoder layer compiled);  attention and loss by name
  cuda_graph  the forward and backward captured once as a CUDA graph and replayed (GPUs only):
              the host's launch work, FSDP2's hooks included, leaves the step, so each rank's
              collectives start when its GPU gets there, not when its host does
  expandable_segments  the CUDA caching allocator's segments grow in place (GPUs only), so a
              rank near its memory's end reuses freed memory of other sizes instead of freeing its
              cache and allocating again (`alloc_retries`)
`batch` is the global batch; each rank takes its slice. FLOPs: 6·N·tokens plus the attention
term (core/flops.py) for the model; what checkpointing recomputes is counted apart and not in MFU.
On GPUs one more step runs under the profiler: `comm_ms` is the time NCCL kernels run and
`exposed_comm_ms` the part of it that no computation kernel overlaps (the most of any rank;
`exposed_comm_least_ms` the least, profiling/overlap.across_ranks says why; `exposed_comm_host_ms`
the part with no computation queued, the host's, profiling/overlap says how).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from trainperf.core.errors import SpecError, Unsupported
from trainperf.core.flops import limits, peak_tflops, transformer_flops
from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.core.ram import check_fits
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.core.stats import summarize
from trainperf.core.timing import PhaseTimer
from trainperf.distributed.fsdp import fsdp2, shard_decoder
from trainperf.distributed.sharded_optim import optimizer_state_bytes
from trainperf.distributed.timing import per_rank_times, slowest
from trainperf.kernels.chunked_loss import chunked_lm_loss
from trainperf.models.head_loss import chunked_head_loss
from trainperf.models.lm import LMConfig, TransformerLM, float8_blocks, lm_loss
from trainperf.models.peers import apply_float8, check_float8_loss, precompute_float8_scales
from trainperf.models.presets import PRESETS, get_preset
from trainperf.models.source import ModelSource, is_model_source, refuse_blocks_of_preset, vocab_of
from trainperf.workloads.ddp import OPTIMIZERS as MAKE_OPTIMIZER
from trainperf.workloads.ddp import REDUCE_DTYPES, release_memory, seeded_tokens, send_gradients_in_bf16
from trainperf.workloads.precision import autocast
from trainperf.workloads.sharded_source import (
    STATE_BYTES_PER_PARAM,
    SourceWithLoss,
    compile_blocks,
    refuse_preset_options,
    source_model,
    source_parameters,
    train_flops,
)
from trainperf.workloads.step import LOSSES, Phase, no_phase
from trainperf.workloads.step_graph import SIDE_STREAM_WARMUP, GraphedIteration

SHARDS = ("full", "hybrid", "none")
OPTIMIZERS = ("adamw", "adamw-fused")
FLOAT8 = ("off", "torchao", "trainperf", "trainperf-head")
CHECKPOINT_HELP = ("none, full, every-K (K a positive integer), all-but-N (N fewer than the layers), ops; "
                   "full, every-K and all-but-N with +attn (attention's output kept)")
KEEP_ATTENTION = "+attn"
ANY_DEPTH = 10**6  # checks a policy's form before a model's depth is known
DDP_GRAPH_WARMUP = 11
# What a command left out of --model, --seq, --batch, --dtype means, per torch.distributed backend:
# the CS336 leaderboard's step on GPUs, a tiny one on CPU processes.
# On GPUs AdamW's fused kernel: its foreach form over FSDP2's sharded parameters costs several times
# as much (docs/sharding.md has the numbers).
DEFAULTS = {"nccl": {"model": "cs336-8b", "seq": 32768, "batch": 2, "dtype": "bf16",
                     "optimizer": "adamw-fused"},
            "gloo": {"model": "tiny", "seq": 16, "batch": 4, "dtype": "fp32", "optimizer": "adamw"}}


@dataclass(frozen=True)
class ShardSpec:
    model: str
    world_size: int
    shard: str
    checkpoint: str
    seq: int
    batch: int  # global: split evenly over the ranks
    dtype: str = "bf16"
    optimizer: str = "adamw"
    offload: bool = False
    compile: bool = False
    attention: str = "sdpa"
    loss: str = "torch"
    float8: str = "off"  # torchao: the decoder's Linears in float8, gathered in float8 when sharded;
    # trainperf: its products on trainperf's float8 GEMMs with delayed scaling (models/lm.py float8_blocks);
    # trainperf-head: the chunked loss's LM-head products too (kernels/float8_head.py)
    dist_backend: str = "nccl"
    reshard_after_forward: bool = True  # distributed/fsdp.py
    prefetch: int = 0  # units gathered ahead explicitly (0: FSDP2's implicit prefetching)
    unit_layers: int = 1  # decoder layers a unit of FSDP2 gathers and reduces together
    reduce_dtype: str = "fp32"  # the gradients' dtype on the wire (FSDP2's reduce-scatter, DDP's all-reduce)
    cuda_graph: bool = False  # forward and backward replayed as one CUDA graph
    expandable_segments: bool = False  # the CUDA caching allocator's segments grow (use_expandable_segments)
    vocab: int | None = None  # None: the preset's own, else 10000
    layers: int | None = None  # decoder layers built (None: the preset's): a part of a model too large
    # for one GPU, measured there to calibrate `trainperf predict`
    blocks: str | None = None  # another model's repeated blocks (models/source.py), where not found
    peak_tflops: float | None = None  # per GPU, what MFU divides by (None: the known-GPU table)
    warmup: int = 2
    iters: int = 5
    lr: float = 1e-4

    def label(self) -> str:
        extras = "".join(f" {x}" for x, on in (("offload", self.offload), ("compiled", self.compile),
                                                (f"float8={self.float8}", self.float8 != "off"),
                                                ("graphed", self.cuda_graph),
                                                ("expandable", self.expandable_segments)) if on)
        model = self.model if self.layers is None else f"{self.model}[{self.layers} layers]"
        return (f"{model} n={self.world_size} shard={self.shard} ckpt={self.checkpoint} "
                f"{self.batch}x{self.seq} {self.dtype} {self.optimizer}{extras}")

    def source(self) -> ModelSource:
        """A model not a preset (is_model_source), to its --layers."""
        return ModelSource(self.model, self.layers)

    def model_config(self) -> LMConfig:
        p = get_preset(self.model)
        vocab = self.vocab or p.vocab or 10_000
        return LMConfig(vocab_size=vocab, context_length=self.seq, d_model=p.d_model, d_ff=p.d_ff,
                        n_layers=self.layers or p.n_layers, n_heads=p.n_heads, attention=self.attention)


def keeps_attention(checkpoint: str) -> bool:
    """Whether the policy keeps the attention's output in the layers it checkpoints whole."""
    return checkpoint.endswith(KEEP_ATTENTION)


def whole_layers(checkpoint: str, n_layers: int) -> range | None:
    """The decoder layers a policy checkpoints whole: all (full), every K-th (every-K), all but the
    last N (all-but-N: the activations of N layers stay, as memory allows), none (none, and ops,
    which checkpoints inside every layer); None for a policy that is none of these."""
    base = checkpoint.removesuffix(KEEP_ATTENTION)
    if base in ("none", "ops"):
        return None if keeps_attention(checkpoint) else range(0)
    if base == "full":
        return range(n_layers)
    every = re.fullmatch(r"every-([1-9][0-9]*)", base)
    if every:
        return range(0, n_layers, int(every.group(1)))
    but = re.fullmatch(r"all-but-([0-9]+)", base)
    if but and int(but.group(1)) < n_layers:
        return range(n_layers - int(but.group(1)))
    return None


def validate(spec: ShardSpec) -> None:
    check_choice("shard", spec.shard, SHARDS)
    source = is_model_source(spec.model)
    if not source:
        check_choice("model", spec.model, PRESETS)
    check_choice("optimizer", spec.optimizer, OPTIMIZERS)
    check_choice("dtype", spec.dtype, ("fp32", "bf16"))
    check_choice("loss", spec.loss, LOSSES)
    check_choice("float8", spec.float8, FLOAT8)
    check_float8_loss(spec.float8, spec.loss)
    check_choice("reduce_dtype", spec.reduce_dtype, REDUCE_DTYPES)
    check_choice("dist_backend", spec.dist_backend, ("nccl", "gloo"))
    given_vocab = ("vocab",) if spec.vocab is not None else ()
    check_positive(spec, "seq", "batch", "iters", "world_size", *given_vocab)
    check_non_negative(spec, "warmup")
    if spec.peak_tflops is not None and not (math.isfinite(spec.peak_tflops) and spec.peak_tflops > 0):
        raise SpecError(f"--peak-tflops must be a positive number, got {spec.peak_tflops}")
    if whole_layers(spec.checkpoint, ANY_DEPTH if source else get_preset(spec.model).n_layers) is None:
        raise SpecError(f"--checkpoint {spec.checkpoint!r}; valid choices: {CHECKPOINT_HELP}")
    if spec.batch % spec.world_size:
        raise SpecError(f"--batch {spec.batch} (the global batch) does not split over "
                        f"--world-size {spec.world_size}")
    if spec.shard == "none" and spec.offload:
        raise SpecError("--offload on needs a sharded model (--shard full or hybrid)")
    if spec.cuda_graph and spec.offload:
        raise SpecError("--cuda-graph on replays the GPU's work alone; --offload on moves parameters "
                        "through the host every step: choose one")
    if spec.prefetch < 0:
        raise SpecError(f"--prefetch must be 0 (FSDP2's own) or a number of units, got {spec.prefetch}")
    if source:  # its depth is known once built: --unit-layers and all-but-N are checked then
        spec.source().check()
        refuse_preset_options(spec)
        if spec.dist_backend == "gloo":
            check_fits(spec.world_size * source_parameters(spec.source()) * STATE_BYTES_PER_PARAM,
                       f"shard {spec.label()} ({spec.world_size} ranks on this CPU)")
        return
    refuse_blocks_of_preset(spec.model, spec.blocks)
    preset_layers = get_preset(spec.model).n_layers
    if spec.layers is not None and not 1 <= spec.layers <= preset_layers:
        raise SpecError(f"--layers must be from 1 to {preset_layers} ({spec.model}'s decoder layers), "
                        f"got {spec.layers}")
    try:
        layers = spec.model_config().n_layers
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    if not 1 <= spec.unit_layers <= layers:
        raise SpecError(f"--unit-layers must be a number of decoder layers from 1 to {layers} "
                        f"({spec.model} has {layers}), got {spec.unit_layers}")
    if spec.dist_backend == "gloo":  # every rank on this host's CPU: refused, not ended by the OOM killer
        check_fits(spec.world_size * bound_bytes(memory_needed(spec)),
                   f"shard {spec.label()} ({spec.world_size} ranks on this CPU)")


# Values a decoder layer keeps for its backward, per token, at the least (d: model width, f: MLP
# width), by checkpointing policy and float8 kind: (of d, of f) in the compute dtype, then (of d, of
# f) in float8.
# - none, bf16: its input, both norms' outputs, q, k, v, rotated q and k, the attention output, the
#   second residual, gate, up and their SwiGLU product (9 d, 3 f; the count leaves some out).
# - none, torchao: its input, q, k, v, the attention's output, the second residual, gate and up
#   (6 d, 2 f): what the attention's and the SwiGLU's backward read, and the norms' inputs; the
#   norms' outputs and the SwiGLU product a compiled layer may compute again.
# - none, trainperf: the same less gate and up (6 d), and in float8 what its products save: each
#   product's input transposed (3 d), gate and up, and the SwiGLU product transposed (3 f).
# - ops: the matrix products' and attention's outputs (6 d, 2 f); trainperf's gate and up product is
#   float8 (6 d in the compute dtype, 2 f in float8).
# - a layer checkpointed whole: its input (d), and with +attn the attention's output too.
KEPT: dict[tuple[str, str], tuple[tuple[float, float], tuple[float, float]]] = {
    ("none", "off"): ((9, 3), (0, 0)), ("none", "torchao"): ((6, 2), (0, 0)),
    ("none", "trainperf"): ((6, 0), (3, 3)),
    ("ops", "off"): ((6, 2), (0, 0)), ("ops", "torchao"): ((6, 2), (0, 0)),
    ("ops", "trainperf"): ((6, 0), (0, 2)),
    ("layer", "any"): ((1, 0), (0, 0)), ("layer+attn", "any"): ((2, 0), (0, 0))}
# State bytes a parameter takes at the activations' peak, the end of the forward: its fp32 weight
# and AdamW's two moments. Its gradient comes in the backward as the activations go (the optimizer
# sets the gradients to None after each step), except where the gradients persist: in DDP's buckets,
# and in the tensors a replayed CUDA graph accumulates into.
STATE_BESIDE_ACTIVATIONS = 12


@cache
def _parameters(cfg: LMConfig) -> int:
    """A preset's parameters, counted on a model built on the meta device: once a configuration, for
    a sweep asks for the bound of every case."""
    with torch.device("meta"):
        return sum(p.numel() for p in TransformerLM(cfg).parameters())


def memory_needed(spec: ShardSpec) -> dict[str, float]:
    """A lower bound of the bytes one rank needs (`bound_bytes` of it): `state` (fp32 weights,
    gradients and AdamW's moments over the shards), `beside_activations` (the part of it held at the
    activations' peak), `activations` (what the checkpointing policy keeps) and `logits` (the fp32
    logits of `--loss torch`, or the float8 gradient of every logit that `--float8 trainperf-head`
    keeps for the head weight's product; the chunked loss's bf16 blocks, one at a time, are left
    out). Of a model not a preset, the state alone."""
    shards = {"full": spec.world_size, "hybrid": max(spec.world_size // 2, 1), "none": 1}[spec.shard]
    persistent = spec.shard == "none" or spec.cuda_graph  # the gradients kept between steps
    beside = STATE_BYTES_PER_PARAM if persistent else STATE_BESIDE_ACTIVATIONS
    if is_model_source(spec.model):
        params = source_parameters(spec.source())
        return {"params": params, "shards": shards, "state": params * STATE_BYTES_PER_PARAM / shards,
                "beside_activations": params * beside / shards, "activations": 0.0, "logits": 0.0}
    cfg = spec.model_config()
    params = _parameters(cfg)
    tokens = spec.batch // spec.world_size * spec.seq
    whole = len(whole_layers(spec.checkpoint, cfg.n_layers))
    kind = "trainperf" if spec.float8.startswith("trainperf") else spec.float8
    dtype_bytes = 2 if spec.dtype == "bf16" else 4

    def kept(policy: str, float8: str) -> float:
        """Bytes a token of one layer keeps."""
        (of_d, of_f), (f8_d, f8_f) = KEPT[policy, float8]
        return (of_d * cfg.d_model + of_f * cfg.d_ff) * dtype_bytes + f8_d * cfg.d_model + f8_f * cfg.d_ff

    layer = "layer+attn" if keeps_attention(spec.checkpoint) else "layer"
    policy = "ops" if spec.checkpoint == "ops" else "none"
    per_token = whole * kept(layer, "any") + (cfg.n_layers - whole) * kept(policy, kind)
    return {"params": params, "shards": shards,
            "state": params * STATE_BYTES_PER_PARAM / shards, "beside_activations": params * beside / shards,
            "activations": per_token * tokens,
            "logits": tokens * cfg.vocab_size * {"torch": 4, "chunked": 0}[spec.loss]
            + (tokens * cfg.vocab_size if spec.float8 == "trainperf-head" else 0.0)}


def bound_bytes(need: dict[str, float]) -> float:
    """The lower bound of memory_needed: the more of the activations' peak (the state held beside
    them, the activations, the logits) and the whole state's, at the optimizer step."""
    return max(need["state"], need["beside_activations"] + need["activations"] + need["logits"])


def cannot_fit(spec: ShardSpec, device: torch.device) -> str | None:
    """Why `spec` cannot fit on this host's GPUs before it starts (None when it may): the lower
    bound of `memory_needed` above one GPU's memory. What passes may still run out of memory."""
    if device.type != "cuda" or spec.offload:
        return None
    have = torch.cuda.get_device_properties(device).total_memory
    return too_large(memory_needed(spec), spec.checkpoint, have)


def too_large(need: dict[str, float], checkpoint: str, have: float) -> str | None:
    """The one-line reason a rank needing `need` cannot fit in `have` bytes, None if it may."""
    total = bound_bytes(need)
    if total <= have:
        return None
    gib = 2**30
    params = f"{need['params'] / 1e9:.2f}B parameters over {need['shards']} shard(s)"
    if total == need["state"]:
        return (f"needs at least {total / gib:.1f} GiB a rank: fp32 weights, gradients and AdamW state "
                f"({params}); a GPU holds {have / gib:.1f} GiB")
    state, when = ("fp32 weights, gradients and AdamW state", "")
    if need["beside_activations"] < need["state"]:
        state, when = "fp32 weights and AdamW's moments", "; the gradients come as the activations go"
    logits = f", {need['logits'] / gib:.1f} GiB of the loss's logits" if need["logits"] else ""
    return (f"needs at least {total / gib:.1f} GiB a rank: {need['beside_activations'] / gib:.1f} GiB of "
            f"{state} ({params}{when}), {need['activations'] / gib:.1f} GiB of activations that "
            f"--checkpoint {checkpoint} keeps{logits}; a GPU holds {have / gib:.1f} GiB")


ATTENTION_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
CUSTOM_ATTENTION_OPS = ("fa4_attention", "fa4_packed_attention", "cudnn_sdpa", "cudnn_fp8_sdpa",
                        "flash_attention_triton")


def attention_ops() -> set:
    """The attention operators a selective policy can keep: SDPA's kernels and trainperf's own
    (those registered by now: an attention's module registers its op when it is imported)."""
    found = {getattr(torch.ops.aten, name).default for name in ATTENTION_OPS if hasattr(torch.ops.aten, name)}
    return found | {getattr(torch.ops.trainperf, name).default for name in CUSTOM_ATTENTION_OPS
                    if hasattr(torch.ops.trainperf, name)}


PRODUCT_OPS = ("mm", "addmm", "bmm", "_scaled_mm")  # PyTorch's matrix products, torchao's float8 one
FLOAT8_PRODUCT_OPS = ("float8_mm", "float8_gate_up")  # trainperf's float8 GEMMs (kernels/float8_mlp.py)


def product_ops() -> set:
    """The matrix products `--checkpoint ops` keeps: PyTorch's, and float8's, torchao's and trainperf's
    (those registered by now: `float8_blocks` registers trainperf's)."""
    aten = torch.ops.aten
    return {getattr(aten, name).default for name in PRODUCT_OPS} | {
        getattr(torch.ops.trainperf, name).default for name in FLOAT8_PRODUCT_OPS
        if hasattr(torch.ops.trainperf, name)}


def _keep_policy(keep: set):  # noqa: ANN202
    """Selective checkpointing's policy: save the outputs of the operators in `keep`, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    def policy(ctx, op, *args, **kwargs):  # noqa: ANN001, ANN202
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _selective(keep: set):  # noqa: ANN202
    """A wrapper that checkpoints a layer keeping the outputs of the operators in `keep`."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    contexts = partial(create_selective_checkpoint_contexts, _keep_policy(keep))
    return partial(checkpoint_wrapper, context_fn=contexts)


def apply_checkpointing(layers: nn.ModuleList, checkpoint: str) -> int:
    """Wrap the decoder layers the policy names in activation checkpointing; how many were."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if checkpoint == "none":
        return 0
    if checkpoint == "ops":
        wrap = _selective(product_ops() | attention_ops())
        chosen = range(len(layers))
    else:
        wrap = _selective(attention_ops()) if keeps_attention(checkpoint) else checkpoint_wrapper
        chosen = whole_layers(checkpoint, len(layers))
        if chosen is None:
            raise SpecError(f"--checkpoint {checkpoint}: the model has {len(layers)} blocks")
    from trainperf.kernels.float8_mlp import keep_gate_up_in_bf16

    for i in chosen:
        if checkpoint != "ops":  # `ops` keeps trainperf's float8 gate and up product: nothing to recompute
            keep_gate_up_in_bf16(layers[i])
        layers[i] = wrap(layers[i])
    return len(chosen)


class LMWithLoss(nn.Module):
    """The LM and its loss as one module, so the sharded root gathers the LM head for the loss.
    `float8_head`: the chunked loss's head products on float8 GEMMs (kernels/float8_head.py)."""

    def __init__(self, lm: TransformerLM, loss: str, float8_head: bool = False) -> None:
        super().__init__()
        self.lm, self.loss = lm, loss
        self.head_state = None
        if float8_head:
            from trainperf.kernels.float8_head import head_state

            self.head_state = head_state(lm.lm_head.weight)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden = self.lm.hidden(tokens)
        if self.head_state is not None:
            from trainperf.kernels.float8_head import float8_chunked_lm_loss

            return float8_chunked_lm_loss(hidden.flatten(0, 1), self.lm.lm_head.weight, targets.flatten(),
                                          self.head_state)
        if self.loss == "chunked":
            return chunked_lm_loss(hidden.flatten(0, 1), self.lm.lm_head.weight, targets.flatten())
        return lm_loss(self.lm.lm_head(hidden), targets)


def hybrid_groups(world: int) -> tuple[int, int]:
    """(replicas, ranks per shard group) of hybrid sharding: the ranks of one host shard
    (LOCAL_WORLD_SIZE under torchrun), or half the ranks when all of them share one host."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    group = local if local < world else max(world // 2, 1)
    if world % group:
        raise Unsupported(f"hybrid sharding: {world} ranks do not split into groups of {group}")
    return world // group, group


def shard_model(model: nn.Module, layers: nn.ModuleList, spec: ShardSpec, world: int,
                device: torch.device) -> nn.Module:
    """The model as the spec shards it: FSDP2 per unit of `layers` and at the root, or DDP."""
    wire = REDUCE_DTYPES[spec.reduce_dtype]
    if spec.shard == "none":
        ids = [device.index] if device.type == "cuda" else None
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        if wire != torch.float32:
            send_gradients_in_bf16(ddp)
        return ddp
    from torch.distributed.device_mesh import init_device_mesh

    fsdp = fsdp2()
    if spec.shard == "hybrid":
        mesh = init_device_mesh(device.type, hybrid_groups(world), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (world,))
    kw: dict[str, Any] = {"mesh": mesh}
    if spec.dtype == "bf16" or wire != torch.float32:
        param_dtype = torch.bfloat16 if spec.dtype == "bf16" else None
        kw["mp_policy"] = fsdp.MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=wire)
    if spec.offload:
        if device.type != "cuda":
            raise Unsupported("--offload on moves parameters from a GPU to the CPU: it needs a GPU")
        kw["offload_policy"] = fsdp.CPUOffloadPolicy()
    if not 1 <= spec.unit_layers <= len(layers):
        raise SpecError(f"--unit-layers must be a number of blocks from 1 to {len(layers)}, "
                        f"got {spec.unit_layers}")
    return shard_decoder(model, layers, spec.reshard_after_forward, spec.prefetch, spec.unit_layers, **kw)


class ShardedStep:
    """One rank's sharded model, optimizer and slice of the global batch; one training step."""

    def __init__(self, spec: ShardSpec, rank: int, world: int, device: torch.device) -> None:
        self.spec, self.device = spec, device
        torch.manual_seed(0)
        self.float8_sharded = spec.float8 == "torchao" and spec.shard != "none"
        self.counted_flops: float | None = None  # a model not a preset: its FLOPs counted, not derived
        self.blocks_found: str | None = None
        per = spec.batch // world
        if is_model_source(spec.model):
            model, blocks = source_model(spec.source(), spec.blocks, device)
            tokens = seeded_tokens(spec.batch, spec.seq, vocab_of(model))
            rows = tokens[rank * per:(rank + 1) * per].to(device)
            self.counted_flops = train_flops(model, rows[:, :-1]) * world
            loss = chunked_head_loss(model) if spec.loss == "chunked" else None  # checked before sharding
            self.blocks_found, layers, root = blocks.describe(), blocks.layers, SourceWithLoss(model, loss)
            if spec.float8 == "torchao":
                apply_float8(model, fsdp_all_gather=self.float8_sharded)
        else:
            with device:
                model = lm = TransformerLM(spec.model_config())
            lm.bind_attention(device)
            rows = global_batch_tokens(spec)[rank * per:(rank + 1) * per].to(device)
            if spec.float8 == "torchao":
                apply_float8(lm, fsdp_all_gather=self.float8_sharded)
            elif spec.float8 in ("trainperf", "trainperf-head"):
                float8_blocks(lm)
            self.matmul_params = lm.matmul_params()
            layers, root = lm.layers, LMWithLoss(lm, spec.loss, float8_head=spec.float8 == "trainperf-head")
        self.checkpointed = apply_checkpointing(layers, spec.checkpoint)
        if spec.compile:
            compile_blocks(model, layers)
        if spec.cuda_graph and device.type != "cuda":
            raise Unsupported("--cuda-graph on captures the step's GPU work: it needs CUDA GPUs (NCCL)")
        # the graph's stream: DDP takes hold of the parameters' autograd nodes as it wraps them
        self.stream = torch.cuda.Stream(device) if spec.cuda_graph else None
        with torch.cuda.stream(self.stream):  # None: the current stream
            self.model = shard_model(root, layers, spec, world, device)
        try:
            self.opt = MAKE_OPTIMIZER[spec.optimizer](self.model.parameters(), lr=spec.lr)
        except (RuntimeError, ValueError) as exc:
            raise Unsupported(f"--optimizer {spec.optimizer}: {str(exc).splitlines()[0]}") from None
        self.x, self.y = rows[:, :-1], rows[:, 1:]
        self.graphed: GraphedIteration | None = None
        self.capture_peak: int | None = None  # bytes allocated at most until the graph was captured

    def forward_backward(self, phase: Phase = no_phase) -> torch.Tensor:
        # DDP trains fp32 weights under autocast; FSDP2's policy casts for itself
        amp = self.spec.dtype if self.spec.shard == "none" else "fp32"
        with phase("forward"), autocast(self.device, amp):
            loss = self.model(self.x, self.y)
        with phase("backward"):
            loss.backward()
        return loss.detach()

    def __call__(self, phase: Phase = no_phase) -> torch.Tensor:
        if not self.spec.cuda_graph:
            loss = self.forward_backward(phase)
        else:  # replayed: the gradients accumulate in place, into tensors the optimizer zeroes
            if self.graphed is None:  # the capture's eager iterations leave gradients, not steps
                self.graphed = GraphedIteration(self.forward_backward, warmup=graph_warmup(self.spec),
                                                thread_local=True, stream=self.stream)
                self.capture_peak = torch.cuda.max_memory_allocated(self.device)
                self.opt.zero_grad(set_to_none=False)
            with phase("forward_backward"):
                loss = self.graphed()
        with phase("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=not self.spec.cuda_graph)
            if self.float8_sharded:
                precompute_float8_scales(self.model)
        return loss


def graph_warmup(spec: ShardSpec) -> int:
    """Eager iterations before the capture. DDP's reducer rebuilds its buckets after the first and
    times iterations with host reads at the tenth, which a capture cannot hold: past both, PyTorch's
    CUDA-graph notes say. FSDP2 initialises itself in the first."""
    return DDP_GRAPH_WARMUP if spec.shard == "none" else SIDE_STREAM_WARMUP


def global_batch_tokens(spec: ShardSpec) -> torch.Tensor:
    """The [batch, seq+1] global token batch, the same on every rank (and in a single process)."""
    return seeded_tokens(spec.batch, spec.seq, spec.model_config().vocab_size)


def flop_counts(spec: ShardSpec, matmul_params: int, checkpointed_layers: int) -> tuple[float, float]:
    """(model FLOPs of one step, FLOPs that checkpointing recomputes: the checkpointed layers'
    forward again, less the attention where +attn keeps it; `ops` recomputes no matrix product)."""
    cfg = spec.model_config()
    tokens = spec.batch * spec.seq
    model = transformer_flops(matmul_params, cfg.n_layers, cfg.d_model, spec.seq, tokens)
    if spec.checkpoint in ("none", "ops"):
        return model, 0.0
    attention_redone = 0 if keeps_attention(spec.checkpoint) else checkpointed_layers
    redo = transformer_flops(cfg.layer_matmul_params * checkpointed_layers, attention_redone, cfg.d_model,
                             spec.seq, tokens, mode="forward")
    return model, redo


def _time_steps(step: ShardedStep, spec: ShardSpec, device: torch.device) -> tuple[list, dict, dict | None,
                                                                                   dict | None, dict]:
    """Every rank's step times, this rank's median phase times (the GPU's, and on GPUs the host's
    time to launch each phase as `<phase>_host`), its memory (on GPUs: the peak in GB, and how
    often the caching allocator freed its cache and retried while timing, each time waiting for the
    GPU), its traced communication (on GPUs) and its GPU's clocks and power while timing."""
    for _ in range(spec.warmup):
        step()
    timer = PhaseTimer(device)
    retries = _alloc_retries(device)
    with GpuMonitor(device) as monitor:
        per_rank = per_rank_times(lambda: step(timer.phase), device, spec.iters)
    retries = _alloc_retries(device) - retries
    phases = {name: summarize(ms)["median"] for name, ms in timer.samples().items()}
    if device.type == "cuda":  # launch-bound where a phase's host time comes close to its GPU time
        phases.update({f"{name}_host": summarize(ms)["median"] for name, ms in timer.host_samples().items()})
    memory = ({"peak_gb": peak_bytes(step, torch.cuda.max_memory_allocated(device)) / 2**30,
               "alloc_retries": retries} if device.type == "cuda" else None)
    traced = None
    if device.type == "cuda":  # one more step, profiled: how much communication the compute hides
        from trainperf.profiling.overlap import step_communication_ms

        traced = step_communication_ms(step, device)
    return per_rank, phases, memory, traced, monitor.metrics()


def peak_bytes(step: ShardedStep, allocated_peak: int) -> int:
    """The most the rank held, from the allocator's peak. A replayed graph allocates nothing: its
    working set shows in its capture alone, which came before the optimizer's first step made
    AdamW's moments, so they are added to the capture's peak."""
    if step.capture_peak is None:
        return allocated_peak
    return max(allocated_peak, step.capture_peak + optimizer_state_bytes(step.opt))


def _alloc_retries(device: torch.device) -> int:
    return torch.cuda.memory_stats(device).get("num_alloc_retries", 0) if device.type == "cuda" else 0


def use_expandable_segments(spec: ShardSpec, device: torch.device) -> None:
    """The caching allocator's kind of segment for the case's memory, set after release_memory's
    empty_cache: a sweep's cases run in the same processes, one after another. Segments that grow
    in place (PyTorch's `expandable_segments`) take freed memory of any size back, where fixed ones
    near a full GPU make the allocator free its cache and retry."""
    if device.type != "cuda":
        if spec.expandable_segments:
            raise Unsupported("--expandable-segments on sets the CUDA caching allocator: it needs CUDA GPUs")
        return
    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{spec.expandable_segments}")


def measure_sharded(spec: ShardSpec, rank: int, world: int, device: torch.device) -> dict[str, Any]:
    release_memory(device)
    use_expandable_segments(spec, device)
    step = ShardedStep(spec, rank, world, device)
    per_rank, phases, memory, traced, gpu_state = _time_steps(step, spec, device)
    if step.counted_flops is None:
        model_flops, redo = flop_counts(spec, step.matmul_params, step.checkpointed)
        source_fields: dict[str, Any] = {"flops_source": "analytic"}
    else:  # what checkpointing recomputes is not counted: no hardware FLOPs for these models
        model_flops, redo = step.counted_flops, 0.0
        source_fields = {"flops_source": "counted (forward x 3)", "blocks_found": step.blocks_found}
    del step
    release_memory(device)
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, (phases, memory, traced))
    s = summarize(slowest(per_rank))
    skew = [max(col) - min(col) for col in zip(*per_rank, strict=True)]  # ranks apart, per step
    tflops = model_flops / (s["median"] / 1e3) / 1e12
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = spec.peak_tflops or peak_tflops(gpu, spec.dtype)
    metrics: dict[str, Any] = {
        "step_ms_median": s["median"], "step_ms_std": s["std"], "step_ms_iqr": s["iqr"], "step_ms_n": s["n"],
        "rank_skew_ms": summarize(skew)["median"],
        **{f"{name}_ms": max(p[0][name] for p in everyone) for name in phases},
        "tokens_per_s": spec.batch * spec.seq / (s["median"] / 1e3),
        "model_tflop": model_flops / 1e12, "recompute_tflop": redo / 1e12, "tflops": tflops,
        "mfu": tflops / peak / world if peak else None, **source_fields,
    }
    if traced is not None:
        from trainperf.profiling.overlap import across_ranks

        comm = across_ranks([p[2] for p in everyone])
        metrics.update(comm_ms=comm.pop("nccl_ms"), **comm)
    metrics.update(gpu_state)  # this rank's (rank 0's in the record)
    metrics.update(limits(tflops / world, peak, gpu, metrics.get("sm_clock_mhz"), redo / model_flops,
                          float8=spec.float8 != "off"))
    if memory is not None:
        peaks = [p[1]["peak_gb"] for p in everyone]
        metrics["peak_mem_gb"] = max(peaks)
        metrics["peak_mem_gb_per_rank"] = ",".join(f"{gb:.2f}" for gb in peaks)
        metrics["alloc_retries"] = max(p[1]["alloc_retries"] for p in everyone)
    return metrics


def scaling_table(ok: pd.DataFrame) -> pd.DataFrame:
    """Per record: its choice (sharding, checkpointing, layers an FSDP2 unit, CUDA graph), tokens/s
    per GPU, and its efficiency: that over the model's best tokens/s on one GPU, whichever choice
    gave it (none without a one-GPU record). FSDP2 on one GPU pays its hooks and gains nothing, so against its
    own one-GPU step a sharded choice would seem to scale past 1. With a fixed global batch this is
    strong scaling, with --batch-per-rank weak scaling."""
    units = ok.get("unit_layers", pd.Series(1, index=ok.index)).fillna(1).astype(int)
    graphed = ok.get("cuda_graph", pd.Series(False, index=ok.index)).fillna(False).astype(bool)
    ok = ok.assign(**{"tokens/s per GPU": ok.tokens_per_s / ok.world_size, "GPUs": ok.world_size},
                   choice=ok.model + " " + ok["shard"] + " ckpt=" + ok.checkpoint
                   + units.map(lambda k: f" unit={k}" if k > 1 else "")
                   + graphed.map(lambda g: " graphed" if g else ""))
    alone = ok[ok.world_size == 1].groupby("model")["tokens/s per GPU"].max()
    return ok.assign(efficiency=ok["tokens/s per GPU"] / ok.model.map(alone))
