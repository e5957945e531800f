"""Each fused kernel against its PyTorch reference, the compiled reference and the stock op
(`trainperf kernels`): time per call and the bandwidth of the traffic a fused kernel cannot avoid.

A kernel is named `<part>-<impl>`: norm-torch is the reference RMSNorm module, norm-fused
PyTorch's `F.rms_norm`, norm-compiled the reference under torch.compile, norm-triton trainperf's
kernel; likewise rope and swiglu; loss-torch builds the full float32 logits, loss-chunked runs the
LM head and cross-entropy in chunks with PyTorch's softmax, loss-triton with trainperf's fused one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F

from trainperf.core.errors import Unsupported
from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.core.ram import check_fits
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.core.stats import summarize
from trainperf.core.timing import time_op
from trainperf.workloads.precision import DTYPES

IMPLS = {"norm": ("torch", "fused", "compiled", "triton"), "rope": ("torch", "compiled", "triton"),
         "swiglu": ("torch", "compiled", "triton"), "loss": ("torch", "chunked", "triton")}
KERNELS = tuple(f"{part}-{impl}" for part, impls in IMPLS.items() for impl in impls)
MODES = ("forward", "forward-backward")
HEAD_DIM = 64  # rope rotates heads of this size; d_model / HEAD_DIM heads
# Elements of one [tokens, d_model] tensor each pass must read or write at least, per part:
# forward, then forward + backward (the backward reads the inputs again and the output's gradient).
TRAFFIC = {"norm": (2, 5), "rope": (2, 4), "swiglu": (3, 8)}


def parts_and_impls(kernels: pd.Series) -> tuple[pd.Series, pd.Series]:
    """'norm-triton' -> ('norm', 'triton'), for a column of kernel names."""
    split = kernels.str.split("-", n=1)
    return split.str[0], split.str[1]


@dataclass(frozen=True)
class KernelSpec:
    kernel: str
    tokens: int
    d_model: int
    dtype: str
    mode: str
    device: str
    vocab: int = 32_000  # the loss's
    warmup: int = 5
    iters: int = 20

    @property
    def part(self) -> str:
        return self.kernel.split("-")[0]

    def label(self) -> str:
        return f"{self.kernel} {self.mode} tokens={self.tokens} d={self.d_model} {self.dtype}"


def validate(spec: KernelSpec) -> None:
    check_choice("kernel", spec.kernel, KERNELS)
    check_choice("mode", spec.mode, MODES)
    check_choice("dtype", spec.dtype, DTYPES)
    check_positive(spec, "tokens", "d_model", "vocab", "iters")
    check_non_negative(spec, "warmup")
    if spec.part == "rope" and spec.d_model % HEAD_DIM:
        from trainperf.core.errors import SpecError

        raise SpecError(f"--d-model {spec.d_model}: rope needs a multiple of the head dim {HEAD_DIM}")
    if spec.device == "cpu":
        width = spec.vocab if spec.part == "loss" else spec.d_model
        check_fits(12 * spec.tokens * width * 4, f"kernel {spec.kernel} at {spec.tokens} tokens")


def _triton(device: torch.device, what: str) -> None:
    from trainperf.kernels import require_triton

    require_triton(device, what)


Op = tuple[Callable[..., torch.Tensor], list[torch.Tensor], list[torch.Tensor]]


def _op(spec: KernelSpec, device: torch.device) -> Op:
    """The function of this kernel, its inputs, and what the backward differentiates against
    (the inputs, and a norm's weight)."""
    dtype, n, d = DTYPES[spec.dtype], spec.tokens, spec.d_model
    part, impl = spec.kernel.split("-", 1)
    grad = spec.mode != "forward"

    def rand(*shape: int, scale: float = 1.0, requires_grad: bool = grad) -> torch.Tensor:
        return (torch.randn(*shape, device=device, dtype=dtype) * scale).requires_grad_(requires_grad)

    if part == "norm":
        from trainperf.models.norms import NORMS

        if impl == "triton":
            _triton(device, "norm-triton")
        module = NORMS["torch" if impl == "compiled" else impl](d).to(device)
        fn = torch.compile(module) if impl == "compiled" else module
        x = rand(n, d)
        return fn, [x], [x, *module.parameters()]
    if part == "rope":
        from trainperf.models.lm import Rope

        rope = Rope(HEAD_DIM, n, 10_000.0, "torch").to(device)
        cos, sin = rope.cos[:n], rope.sin[:n]
        if impl == "triton":
            _triton(device, "rope-triton")
            from trainperf.kernels.rope import rope_triton as rotate
        else:
            from trainperf.kernels.rope_reference import rope_reference as rotate
        fn = torch.compile(rotate) if impl == "compiled" else rotate
        x = rand(1, d // HEAD_DIM, n, HEAD_DIM)
        return (lambda x: fn(x, cos, sin)), [x], [x]
    if part == "swiglu":
        if impl == "triton":
            _triton(device, "swiglu-triton")
            from trainperf.kernels.swiglu import swiglu_triton as act
        else:
            def act(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
                return F.silu(a) * b
        fn = torch.compile(act) if impl == "compiled" else act
        ab = [rand(n, d), rand(n, d)]
        return fn, ab, ab
    targets = torch.randint(0, spec.vocab, (n,), device=device)
    if impl == "torch":
        from trainperf.models.lm import lm_loss

        def loss(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return lm_loss(h @ w.T, targets)
    else:
        from trainperf.kernels.chunked_loss import chunked_lm_loss

        if impl == "triton":
            _triton(device, "loss-triton")

        def loss(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return chunked_lm_loss(h, w, targets, fused=impl == "triton")
    hw = [rand(n, d), rand(spec.vocab, d, scale=d**-0.5)]
    return loss, hw, hw


def operation(spec: KernelSpec, device: torch.device) -> Callable[[], object]:
    """One timed call: the forward (no graph), or the forward and its backward."""
    fn, inputs, wrt = _op(spec, device)
    if spec.mode == "forward":
        def forward() -> object:
            with torch.no_grad():
                return fn(*inputs)
        return forward
    out = fn(*inputs)
    grad_out = torch.randn_like(out)

    def forward_backward() -> object:
        return torch.autograd.grad(fn(*inputs), wrt, grad_out)
    return forward_backward


def measure_kernel(spec: KernelSpec) -> dict[str, Any]:
    device = torch.device(spec.device)
    torch.manual_seed(0)
    try:
        op = operation(spec, device)
        op()  # compile, tune, or refuse here, not inside the timed loop
    except (NotImplementedError, RuntimeError) as exc:
        if isinstance(exc, torch.cuda.OutOfMemoryError) or "not supported" not in str(exc).lower():
            raise
        raise Unsupported(str(exc).splitlines()[0][:300]) from None
    with GpuMonitor(device) as monitor:
        samples = time_op(op, device, warmup=spec.warmup, reps=spec.iters)
    s = summarize(samples)
    keys = ("median", "mean", "std", "iqr", "min", "cv", "n")
    metrics: dict[str, Any] = {f"time_ms_{k}": s[k] for k in keys}
    if spec.part in TRAFFIC:
        elements = TRAFFIC[spec.part][spec.mode != "forward"] * spec.tokens * spec.d_model
        metrics["gbps"] = elements * DTYPES[spec.dtype].itemsize / (s["median"] / 1e3) / 1e9
    metrics.update(monitor.metrics())
    return metrics
