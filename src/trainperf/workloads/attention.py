"""Attention op timing and peak memory per implementation (`trainperf attention`).

FLOPs (the convention of the FlashAttention papers): forward = 4·B·H·N²·D, halved when causal;
backward = 2.5 × forward (five matmuls to the forward's two; recomputation not counted).

With `compile`, a case follows the CS336 FlashAttention leaderboard's protocol: the attention call
under torch.compile, `o.sum().backward()` as the backward, timed by `triton.testing.do_bench`
(which flushes the L2 cache between calls and picks its own repetitions). On a GPU such a case
also records the summed kernel time and the host's launch time per call: at short sequences the
host takes longer to launch the compiled call than its kernels run, and do_bench then times the
launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainperf.attention.registry import get_attention
from trainperf.core.errors import Unsupported
from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.core.ram import check_fits
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.core.stats import summarize
from trainperf.core.timing import kernel_and_host_ms, time_op
from trainperf.workloads.precision import DTYPES

MODES = ("forward", "backward", "forward-backward")
FLOP_FACTOR = {"forward": 1.0, "backward": 2.5, "forward-backward": 3.5}
# What PyTorch says when a pinned SDPA backend cannot take the inputs.
_UNSUPPORTED_HINTS = ("No available kernel", "not supported", "Unsupported", "only supports")


@dataclass(frozen=True)
class AttentionSpec:
    attention: str
    batch: int
    heads: int
    seq: int
    head_dim: int
    dtype: str
    mode: str
    causal: bool
    device: str
    warmup: int = 5
    iters: int = 20
    compile: bool = False  # the leaderboard protocol (module docstring)

    def label(self) -> str:
        return (f"{self.attention} {self.mode} b={self.batch} h={self.heads} n={self.seq} "
                f"d={self.head_dim} {self.dtype}{' causal' if self.causal else ''}"
                f"{' compiled' if self.compile else ''}")


def validate(spec: AttentionSpec) -> None:
    check_positive(spec, "batch", "heads", "seq", "head_dim", "iters")
    check_non_negative(spec, "warmup")
    check_choice("mode", spec.mode, MODES)
    check_choice("dtype", spec.dtype, DTYPES)
    if spec.device == "cpu":  # inputs, output and their gradients; scores where they are materialised
        rows = spec.batch * spec.heads * spec.seq
        check_fits(8 * rows * spec.head_dim * 4 + 3 * rows * spec.seq * 4,
                   f"attention at batch {spec.batch}, {spec.heads} heads, sequence {spec.seq}")


def attention_flops(spec: AttentionSpec) -> float:
    fwd = 4.0 * spec.batch * spec.heads * spec.seq**2 * spec.head_dim * (0.5 if spec.causal else 1.0)
    return FLOP_FACTOR[spec.mode] * fwd


def operation(spec: AttentionSpec, device: torch.device):
    """The callable to time for this mode, built on fresh random inputs."""
    fn = get_attention(spec.attention, device)
    shape = (spec.batch, spec.heads, spec.seq, spec.head_dim)
    grad = spec.mode != "forward"
    q, k, v = (torch.randn(shape, dtype=DTYPES[spec.dtype], device=device, requires_grad=grad)
               for _ in range(3))

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fn(q, k, v, causal=spec.causal)

    if spec.compile:
        torch._dynamo.reset()  # each case compiles afresh: `attend` is one code object for all cases
    call = torch.compile(attend, fullgraph=True) if spec.compile else attend

    def forward() -> torch.Tensor:
        return call(q, k, v)

    if spec.compile and spec.mode == "forward-backward":
        return lambda: forward().sum().backward()
    if spec.mode == "forward":
        def op() -> object:
            with torch.no_grad():
                return forward()
        return op
    dout = torch.randn(shape, dtype=DTYPES[spec.dtype], device=device)
    if spec.mode == "forward-backward":
        return lambda: torch.autograd.grad(forward(), (q, k, v), dout)
    out = forward()
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def measure_attention(spec: AttentionSpec) -> dict[str, Any]:
    device = torch.device(spec.device)
    torch.manual_seed(0)
    try:
        op = operation(spec, device)
        op()  # first call: compile / reject inputs here, not inside the timed loop
    except RuntimeError as exc:
        if isinstance(exc, torch.cuda.OutOfMemoryError) or not any(
                h in str(exc) for h in _UNSUPPORTED_HINTS):
            raise
        raise Unsupported(str(exc).strip().splitlines()[0][:300]) from None
    except (ValueError, NotImplementedError) as exc:
        raise Unsupported(str(exc)[:300]) from None
    metrics: dict[str, Any] = {}
    with GpuMonitor(device) as monitor:
        if spec.compile and device.type == "cuda":
            from triton.testing import do_bench

            samples = do_bench(op, return_mode="all")
            metrics["kernel_ms"], metrics["host_ms"] = kernel_and_host_ms(op, device)
        else:
            samples = time_op(op, device, warmup=spec.warmup, reps=spec.iters)
    if device.type == "cuda":
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        op()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        metrics.update(peak_mem_mb=peak / 2**20, op_mem_mb=(peak - base) / 2**20)
    s = summarize(samples)
    metrics.update({f"time_ms_{k}": s[k] for k in ("median", "mean", "std", "iqr", "min", "cv", "n")})
    metrics["tflops"] = attention_flops(spec) / (s["median"] / 1e3) / 1e12
    metrics.update(monitor.metrics())
    return metrics
