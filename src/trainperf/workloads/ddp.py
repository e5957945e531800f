"""A data-parallel training step of the LM per gradient-sync variant (`trainperf ddp`).

Every rank trains the same model on its own slice of one global batch, eager or with each decoder
layer compiled (`--compile on`: the gradients of a layer still arrive as its backward ends, so the
overlapping variants keep their chance to overlap). Measured per variant:
  step_ms          median step time of the slowest rank (ranks start each step together)
  compute_ms       the same step with no gradient synchronisation at all
  nccl_ms          on GPUs, from the kernel trace of one more step on every rank: the time NCCL
                   kernels run (the most of any rank)
  exposed_comm_ms  of that, the time no computation kernel overlaps (the most of any rank;
                   exposed_comm_least_ms the least: the rest is ranks waiting for one another;
                   exposed_comm_host_ms the most exposed rank's part with no computation queued)
  hidden_share     1 − exposed / NCCL time (0: nothing overlapped; 1: all of it hidden), the
                   definition `shard` uses. Without kernels to trace (gloo on CPUs) the exposed
                   time is step_ms − compute_ms and the share is taken of comm_alone_ms
  comm_alone_ms    the variant's collectives timed alone, on buffers of the gradients' sizes
`reduce_dtype` bf16 sends every variant's gradients in bf16, half the bytes of the fp32 gradients
(trainperf's variants cast each buffer for its all-reduce, DDP takes PyTorch's bf16 compression
hook, FSDP2 its reduce dtype), so over a slow link the backward has half as much to hide.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from trainperf.core.errors import SpecError, Unsupported
from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.core.ram import check_fits, lm_step_bytes
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.core.stats import summarize
from trainperf.distributed.fsdp import fsdp2, shard_decoder
from trainperf.distributed.grad_sync import (
    BucketedSync,
    FlatSync,
    GradSync,
    NaiveSync,
    OverlapSync,
    bucket_sizes_bytes,
)
from trainperf.distributed.links import check_link
from trainperf.distributed.sharded_optim import ShardedOptimizer, optimizer_state_bytes
from trainperf.distributed.timing import per_rank_loop_times, slowest
from trainperf.models.lm import LMConfig, TransformerLM, lm_loss
from trainperf.models.presets import PRESETS, get_preset
from trainperf.models.source import ModelSource, is_model_source, logits_of, refuse_blocks_of_preset, vocab_of
from trainperf.workloads.precision import autocast
from trainperf.workloads.sharded_source import (
    STATE_BYTES_PER_PARAM,
    compile_blocks,
    source_model,
    source_parameters,
)

VARIANTS = ("naive", "flat", "overlap", "bucketed", "ddp", "fsdp2")
REDUCE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
OPTIMIZERS = {"adamw": torch.optim.AdamW, "adamw-fused": partial(torch.optim.AdamW, fused=True),
              "sgd": torch.optim.SGD}


def send_gradients_in_bf16(model: nn.parallel.DistributedDataParallel) -> None:
    """DDP all-reduces each bucket in bf16 and writes the mean back (PyTorch's compression hook)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    try:
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    except TypeError as exc:  # the hook wants NCCL (or XCCL)
        raise Unsupported(f"ddp with --reduce-dtype bf16: {exc}") from None


@dataclass(frozen=True)
class DDPSpec:
    variant: str
    model: str
    world_size: int
    bucket_mb: float | None
    shard_optimizer: bool
    seq: int
    batch: int  # per rank
    dtype: str  # autocast's, over fp32 weights
    dist_backend: str
    warmup: int = 3
    iters: int = 10
    lr: float = 1e-3
    vocab: int = 10_000
    optimizer: str = "adamw"
    link: str = "auto"  # distributed/links.py
    round: int = 1  # which of the alternating rounds (workloads/ddp_rounds.py)
    compile: bool = False  # each decoder layer compiled: far fewer kernel launches from the host
    reduce_dtype: str = "fp32"  # the gradients' dtype on the wire
    blocks: str | None = None  # another model's repeated blocks (models/source.py), where not found

    def label(self) -> str:
        bucket = f" {self.bucket_mb:g}MB" if self.bucket_mb else ""
        zero = " zero1" if self.shard_optimizer else ""
        link = f" over {self.link}" if self.link != "auto" else ""
        compiled = " compiled" if self.compile else ""
        again = f" round {self.round}" if self.round > 1 else ""
        wire = f" {self.reduce_dtype} grads" if self.reduce_dtype != "fp32" else ""
        return f"{self.variant}{bucket} {self.model} n={self.world_size}{zero}{link}{compiled}{wire}{again}"

    def model_config(self) -> LMConfig:
        p = get_preset(self.model)
        return LMConfig(vocab_size=self.vocab, context_length=self.seq, d_model=p.d_model, d_ff=p.d_ff,
                        n_layers=p.n_layers, n_heads=p.n_heads)


def validate(spec: DDPSpec) -> None:
    check_choice("variant", spec.variant, VARIANTS)
    check_choice("dist_backend", spec.dist_backend, ("nccl", "gloo"))
    check_link(spec.link, spec.dist_backend)
    source = is_model_source(spec.model)
    if source:
        ModelSource(spec.model).check()
    else:
        check_choice("model", spec.model, PRESETS)
        refuse_blocks_of_preset(spec.model, spec.blocks)
    check_choice("optimizer", spec.optimizer, OPTIMIZERS)
    if spec.variant == "fsdp2" and spec.shard_optimizer:
        raise SpecError("--shard-optimizer on with fsdp2: FSDP2 already shards optimizer state")
    check_choice("dtype", spec.dtype, ("fp32", "bf16"))
    check_choice("reduce_dtype", spec.reduce_dtype, REDUCE_DTYPES)
    check_positive(spec, "seq", "batch", "iters")
    check_non_negative(spec, "warmup")
    if spec.bucket_mb is not None and spec.bucket_mb <= 0:
        raise SpecError(f"--bucket-mb must be positive, got {spec.bucket_mb}")
    if spec.world_size < 2:
        raise SpecError(f"--world-size must be at least 2, got {spec.world_size}")
    if spec.dist_backend == "gloo" and source:  # its state at the least, on every rank of this CPU
        check_fits(spec.world_size * source_parameters(ModelSource(spec.model)) * STATE_BYTES_PER_PARAM,
                   f"ddp {spec.label()} ({spec.world_size} ranks on this CPU)")
    elif spec.dist_backend == "gloo":  # every rank on this host's CPU: refused, not ended by the OOM killer
        c = spec.model_config()
        check_fits(spec.world_size * lm_step_bytes(c.d_model, c.d_ff, c.n_layers, c.n_heads, c.vocab_size,
                                                   spec.batch, spec.seq),
                   f"ddp {spec.label()} ({spec.world_size} ranks on this CPU)")


def seeded_tokens(rows: int, seq: int, vocab: int) -> torch.Tensor:
    """The same [rows, seq+1] token batch on every rank (and in single-process runs)."""
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab, (rows, seq + 1), generator=g)


def global_batch(spec: DDPSpec, world: int, vocab: int) -> torch.Tensor:
    """The [world·batch, seq+1] global batch every rank takes its slice of."""
    return seeded_tokens(world * spec.batch, spec.seq, vocab)


class DataParallelStep:
    """Model, gradient sync and optimizer of one rank, and one training step."""

    def __init__(self, spec: DDPSpec, rank: int, world: int, device: torch.device, variant: str) -> None:
        self.spec, self.device = spec, device
        torch.manual_seed(0)
        if is_model_source(spec.model):
            model, blocks = source_model(ModelSource(spec.model), spec.blocks, device)
            layers, vocab = blocks.layers, vocab_of(model)
        else:
            with device:
                model = TransformerLM(spec.model_config())
            layers, vocab = model.layers, spec.vocab
        with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p, src=0)
        if spec.compile:  # before the sync wraps or hooks it
            compile_blocks(model, layers)
        self.sync: GradSync
        wire = REDUCE_DTYPES[spec.reduce_dtype]
        compressed = wire != torch.float32
        if variant == "ddp":
            # Dynamo would split each compiled layer again at DDP's bucket boundaries (and refuses
            # buckets under 1 MiB): every variant gets the same per-layer graphs instead
            torch._dynamo.config.optimize_ddp = False
            ids = [device.index] if device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=spec.bucket_mb)
            if compressed:
                send_gradients_in_bf16(model)
            self.sync = GradSync(model)
        elif variant == "fsdp2":
            policy = {"mp_policy": fsdp2().MixedPrecisionPolicy(reduce_dtype=wire)} if compressed else {}
            try:
                # FSDP2's default mesh is on the GPU whenever one is visible, even under gloo
                shard_decoder(model, layers, mesh=init_device_mesh(device.type, (world,)), **policy)
            except Exception as exc:  # noqa: BLE001 - FSDP2 support varies by backend and version
                raise Unsupported(f"fsdp2 on {spec.dist_backend}: {str(exc).splitlines()[0]}") from None
            self.sync = GradSync(model)
        else:
            sync_cls = {"none": GradSync, "naive": NaiveSync, "flat": FlatSync, "overlap": OverlapSync}
            self.sync = (BucketedSync(model, spec.bucket_mb, wire) if variant == "bucketed"
                         else sync_cls[variant](model, wire))
        self.model = model
        opt_cls = OPTIMIZERS[spec.optimizer]
        self.opt = (ShardedOptimizer(model.parameters(), opt_cls, lr=spec.lr) if spec.shard_optimizer
                    else opt_cls(model.parameters(), lr=spec.lr))
        rows = global_batch(spec, world, vocab)[rank * spec.batch:(rank + 1) * spec.batch].to(device)
        self.x, self.y = rows[:, :-1], rows[:, 1:]

    def __call__(self) -> torch.Tensor:
        with autocast(self.device, self.spec.dtype):
            loss = lm_loss(logits_of(self.model, self.x).float(), self.y)
        loss.backward()
        self.sync.finish()
        self.opt.step()
        self.sync.zero_grad(self.opt)
        return loss

    def close(self) -> None:
        """Let the model go: the sync's hooks would keep it alive past the case."""
        self.sync.close()

    def opt_state_bytes(self) -> int:
        if isinstance(self.opt, ShardedOptimizer):
            return self.opt.state_bytes()
        return optimizer_state_bytes(self.opt)


def _slowest(fn, device: torch.device, warmup: int, steps: int, calls: int = 1) -> dict[str, float]:
    """Statistics over steps of the slowest rank's time in ms per call (ranks start each step
    together; a step is `calls` calls back to back)."""
    for _ in range(warmup):
        fn()
    return summarize(slowest(per_rank_loop_times(fn, device, calls, steps)))


def _comm_sizes(spec: DDPSpec, model: nn.Module) -> list[int]:
    """Byte sizes of the buffers the variant's collectives move per step."""
    nbytes = [p.numel() * 4 for p in model.parameters() if p.requires_grad]  # fp32 grads under autocast
    if spec.variant in ("naive", "overlap"):
        return nbytes
    if spec.variant in ("bucketed", "ddp"):
        return bucket_sizes_bytes(model, spec.bucket_mb)
    return [sum(nbytes)]


def _comm_alone_ms(spec: DDPSpec, sizes: list[int], device: torch.device) -> float:
    """The variant's collectives on gradient-sized buffers, with no compute around them, timed as
    `trainperf comm` times them (back-to-back calls, the slowest rank's)."""
    bufs = [torch.ones(n // 4, device=device, dtype=REDUCE_DTYPES[spec.reduce_dtype]) for n in sizes]
    world = dist.get_world_size()

    def run() -> None:
        for b in bufs:
            if spec.variant == "fsdp2":  # all-gather params (fwd, bwd) and reduce-scatter grads
                shard = torch.empty(b.numel() // world, device=device, dtype=b.dtype)
                dist.all_gather_into_tensor(b[: shard.numel() * world], shard)
                dist.all_gather_into_tensor(b[: shard.numel() * world], shard)
                dist.reduce_scatter_tensor(shard, b[: shard.numel() * world])
            else:
                dist.all_reduce(b)

    return _slowest(run, device, warmup=2, steps=3, calls=5)["median"]


def release_memory(device: torch.device) -> float:
    """Free the previous model and return the GB still allocated after that.

    Gradient hooks hold a model in reference cycles that only gc breaks, and NCCL may keep the
    tensors of async collectives until later; whatever is left counts as `leftover_mem_gb` and is
    taken off the case's own `peak_mem_gb`, so one case's leftovers never inflate the next one's."""
    gc.collect()
    if device.type != "cuda":
        return 0.0
    torch.cuda.synchronize(device)
    dist.barrier()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device) / 2**30


def measure_ddp(spec: DDPSpec, rank: int, world: int, device: torch.device) -> dict[str, Any]:
    release_memory(device)
    compute_only = DataParallelStep(spec, rank, world, device, "none")
    compute_ms = _slowest(compute_only, device, spec.warmup, spec.iters)["median"]
    sizes = _comm_sizes(spec, compute_only.model)
    compute_only.close()
    del compute_only
    leftover_gb = release_memory(device)
    step = DataParallelStep(spec, rank, world, device, spec.variant)
    with GpuMonitor(device) as monitor:
        stats = _slowest(step, device, spec.warmup, spec.iters)
    step_ms = stats["median"]
    metrics: dict[str, Any] = {"opt_state_mb": step.opt_state_bytes() / 2**20}
    if device.type == "cuda":
        metrics["peak_mem_gb"] = torch.cuda.max_memory_allocated(device) / 2**30 - leftover_gb
        metrics["leftover_mem_gb"] = leftover_gb
        from trainperf.profiling.overlap import across_ranks, step_communication_ms

        traced: list[Any] = [None] * world
        dist.all_gather_object(traced, step_communication_ms(step, device))
        metrics.update(across_ranks(traced))
    step.close()
    del step
    release_memory(device)
    comm_alone_ms = _comm_alone_ms(spec, sizes, device)
    if device.type != "cuda":  # no kernels to trace: what the step lost to its communication
        metrics.update(exposed_comm_ms=max(step_ms - compute_ms, 0.0))
    comm = metrics.get("nccl_ms", comm_alone_ms)
    metrics.update({
        "step_ms_median": step_ms, "step_ms_std": stats["std"], "step_ms_n": stats["n"],
        "compute_ms": compute_ms, "comm_alone_ms": comm_alone_ms,
        "hidden_share": min(max(1 - metrics["exposed_comm_ms"] / comm, 0.0), 1.0) if comm > 0 else None,
        "tokens_per_s": world * spec.batch * spec.seq / (step_ms / 1e3),
    })
    metrics.update(monitor.metrics())
    return metrics
