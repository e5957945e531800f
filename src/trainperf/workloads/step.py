"""Forward / backward / optimizer timing of the GPT-style LM (`trainperf step`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from trainperf.core.errors import SpecError
from trainperf.core.flops import limits, peak_tflops, transformer_flops
from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.core.ram import check_fits, lm_step_bytes
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.core.stats import HIGH_CV, summarize
from trainperf.core.timing import LAUNCH_BOUND_RATIO, PhaseTimer, start_measured_window
from trainperf.kernels.chunked_loss import chunked_lm_loss
from trainperf.models.lm import LMConfig, TransformerLM, lm_loss
from trainperf.models.presets import get_preset
from trainperf.workloads.precision import (
    autocast,
    check_autocast_dtype,
    check_compiler,
    compile_regions,
    grad_scaler,
)

MODES = ("train", "forward", "forward-backward")
LOSSES = ("torch", "chunked")
PHASES = {"train": ("forward", "backward", "optimizer"), "forward": ("forward",),
          "forward-backward": ("forward", "backward")}


@dataclass(frozen=True)
class StepSpec:
    """One case of the step benchmark. Model dims are resolved from `model` unless overridden."""

    model: str
    seq: int
    batch: int
    dtype: str  # autocast's, over fp32 weights
    compile: bool
    mode: str
    device: str
    d_model: int
    d_ff: int
    layers: int
    heads: int
    attention: str = "sdpa"
    norm: str = "torch"
    rope: str = "torch"
    swiglu: str = "torch"
    loss: str = "torch"  # torch | chunked (LM head + cross-entropy without full fp32 logits)
    tf32: bool = True
    vocab: int = 10_000
    warmup: int = 5
    iters: int = 10

    @classmethod
    def from_preset(cls, model: str, **kw: Any) -> StepSpec:
        p = get_preset(model)
        dims = {"d_model": p.d_model, "d_ff": p.d_ff, "layers": p.n_layers, "heads": p.n_heads}
        if kw.get("vocab") is None:  # the preset's vocabulary, else the spec's default
            kw.pop("vocab", None)
            if p.vocab is not None:
                kw["vocab"] = p.vocab
        dims.update({k: v for k, v in kw.items() if k in dims and v is not None})
        rest = {k: v for k, v in kw.items() if k not in dims}
        return cls(model=model, **dims, **rest)

    def model_config(self) -> LMConfig:
        return LMConfig(vocab_size=self.vocab, context_length=self.seq, d_model=self.d_model,
                        d_ff=self.d_ff, n_layers=self.layers, n_heads=self.heads,
                        attention=self.attention, norm=self.norm, rope=self.rope, swiglu=self.swiglu)

    def label(self) -> str:
        return (f"{self.model} seq={self.seq} batch={self.batch} {self.dtype}"
                f"{' compiled' if self.compile else ''} {self.mode}")


def validate(spec: StepSpec) -> None:
    """SpecError (one line: bad value and valid choices) for anything that cannot run at all."""
    check_positive(spec, "seq", "batch", "vocab", "iters", "d_model", "d_ff", "layers", "heads")
    check_non_negative(spec, "warmup")
    check_choice("mode", spec.mode, MODES)
    check_choice("loss", spec.loss, LOSSES)
    try:
        spec.model_config()
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    device = torch.device(spec.device)
    check_autocast_dtype(spec.dtype, device)
    if spec.compile:
        check_compiler(device)
    if device.type == "cpu":
        check_fits(lm_step_bytes(spec.d_model, spec.d_ff, spec.layers, spec.heads, spec.vocab, spec.batch,
                                 spec.seq), f"a step of {spec.label()}")


Phase = Callable[[str], AbstractContextManager]


def no_phase(_name: str) -> AbstractContextManager:
    return nullcontext()


class StepCase:
    """The model, optimizer and batch of one case, and one step split into named phases."""

    def __init__(self, spec: StepSpec) -> None:
        self.spec = spec
        self.device = device = torch.device(spec.device)
        torch.manual_seed(0)
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = spec.tf32
            torch.backends.cudnn.allow_tf32 = spec.tf32
        with device:  # initialise on the device: building 2.7B parameters on the CPU takes ~20 s
            self.model = TransformerLM(spec.model_config())
        self.opt = (torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=device.type == "cuda")
                    if spec.mode == "train" else None)
        self.scaler = grad_scaler(device, spec.dtype)
        self.model.bind_attention(device)  # before compiling: a choice made inside is a guard
        if spec.compile:
            compile_regions([*self.model.layers, self.model.output_norm])
        tokens = torch.randint(0, spec.vocab, (spec.batch, spec.seq + 1), device=device)
        self.x, self.y = tokens[:, :-1], tokens[:, 1:]

    def run(self, phase: Phase = no_phase, until: str | None = None) -> torch.Tensor:
        """One step; `phase(name)` wraps forward, backward and optimizer (timers, ranges).

        `until="forward"` stops after the forward pass (its activations kept for backward).
        """
        spec = self.spec
        grad_ctx = torch.no_grad if spec.mode == "forward" else torch.enable_grad
        with phase("forward"), grad_ctx(), autocast(self.device, spec.dtype):
            if spec.loss == "chunked":
                loss = chunked_lm_loss(self.model.hidden(self.x), self.model.lm_head.weight, self.y)
            else:
                loss = lm_loss(self.model(self.x), self.y)
        if until == "forward":
            return loss
        if spec.mode != "forward":
            with phase("backward"):
                self.scaler.scale(loss).backward()
        if self.opt is not None:
            with phase("optimizer"):
                self.scaler.step(self.opt)
                self.scaler.update()
                self.opt.zero_grad(set_to_none=True)
        elif spec.mode == "forward-backward":
            self.model.zero_grad(set_to_none=True)
        return loss


def measure_step(spec: StepSpec, peak_override: float | None = None) -> dict[str, Any]:
    """Time `spec.iters` steps after `spec.warmup`; return flat metrics (see README)."""
    t0 = time.perf_counter()
    case = StepCase(spec)
    flops = transformer_flops(case.model.matmul_params(), spec.layers, spec.d_model, spec.seq,
                              spec.batch * spec.seq, causal=True, mode=spec.mode)
    return timed_steps(case, spec, t0, flops, "analytic", peak_override)


class Case(Protocol):
    """What `timed_steps` times: a step split into phases, on a model, on a device."""

    model: torch.nn.Module
    device: torch.device

    def run(self, phase: Phase = ..., until: str | None = None) -> torch.Tensor: ...


def timed_steps(case: Case, spec: Any, t0: float, flops: float, flops_source: str,
                peak_override: float | None = None) -> dict[str, Any]:
    """Time `spec.iters` steps of `case` after `spec.warmup` (the spec's batch, seq, dtype, mode;
    its tf32 where it has one); flat metrics, TFLOP/s and MFU from `flops` per step, named by
    `flops_source` (analytic: 6·N·tokens and attention; counted: PyTorch's flop counter)."""
    device = case.device
    timer, monitor = PhaseTimer(device), GpuMonitor(device)
    try:  # a case that fails (out of memory) must not leave the monitor sampling
        for i in range(spec.warmup + spec.iters):
            if i == spec.warmup:
                start_measured_window(device)
                monitor.start()
                warmup_s = time.perf_counter() - t0
            timer.enabled = i >= spec.warmup
            with timer.phase("step"):
                loss = case.run(timer.phase)
            if device.type == "cuda":
                torch.cuda.synchronize()  # each step starts on an idle queue, so host times mean launch
    finally:
        monitor.stop()

    metrics = phase_metrics(timer, PHASES[spec.mode])
    metrics["setup_and_warmup_s"] = warmup_s  # includes compilation when --compile on
    tokens_per_step = spec.batch * spec.seq
    step_s = metrics["step_ms_median"] / 1e3
    metrics["params_m"] = round(sum(p.numel() for p in case.model.parameters()) / 1e6, 2)
    metrics["tokens_per_s"] = tokens_per_step / step_s
    metrics["tflops"] = flops / step_s / 1e12
    metrics["flops_source"] = flops_source
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_override or peak_tflops(gpu, spec.dtype, getattr(spec, "tf32", True))
    metrics["peak_tflops"] = peak
    metrics["mfu"] = metrics["tflops"] / peak if peak else None
    metrics["loss"] = float(loss.detach())
    if device.type == "cuda":
        metrics["peak_mem_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
        metrics["peak_reserved_gb"] = torch.cuda.max_memory_reserved(device) / 2**30
    metrics.update(monitor.metrics())
    metrics.update(limits(metrics["tflops"], peak, gpu, metrics.get("sm_clock_mhz")))
    return metrics


def phase_metrics(timer: PhaseTimer, phases: tuple[str, ...]) -> dict[str, Any]:
    """Per-phase mean/std/median (+ full stats for the step) and noise/launch-bound notes."""
    samples, host = timer.samples(), timer.host_samples()
    metrics: dict[str, Any] = {}
    notes = []
    for phase in (*phases, "step"):
        s = summarize(samples[phase])
        keys = ("mean", "std", "median", "iqr", "ci95", "cv", "min", "n") if phase == "step" \
            else ("mean", "std", "median")
        metrics.update({f"{phase}_ms_{k}": s[k] for k in keys})
        if s["cv"] > HIGH_CV:
            notes.append(f"noisy {phase} (cv {s['cv']:.0%})")
        if timer.cuda and phase != "step":
            ratio = summarize(host[phase])["median"] / s["median"]
            metrics[f"{phase}_host_ratio"] = ratio
            if ratio >= LAUNCH_BOUND_RATIO:
                notes.append(f"launch-bound {phase}")
    metrics["notes"] = "; ".join(notes)
    return metrics
