"""A Hugging Face Llama training iteration across SDPA backends (`trainperf llama`).

One iteration is what the reference benchmark times: forward from random input embeddings with
an all-ones attention mask (which a model compiled whole does not read: hf_llama), cross-entropy
against random targets, zero_grad, backward, SGD step (lr 1e-6). FLOPs: 6·N·tokens plus the
causal attention term (see core/flops.py), N counting the weights inside matrix multiplies (the
tied LM head included).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F

from trainperf.core.errors import SpecError, Unsupported
from trainperf.core.flops import limits, peak_tflops, transformer_flops
from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.core.ram import check_fits, training_step_bytes
from trainperf.core.record import Record
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.core.stats import summarize
from trainperf.core.timing import PhaseTimer, start_measured_window
from trainperf.kernels.chunked_loss import chunked_lm_loss
from trainperf.models import hf_llama, peers
from trainperf.workloads.precision import DTYPES, check_compiler, compile_regions
from trainperf.workloads.step import LOSSES, Phase, no_phase
from trainperf.workloads.step_graph import GraphedIteration

DEFAULT_GRID = ((1, 16384), (2, 8192), (3, 4096), (6, 2048), (12, 1024), (24, 768))
CPU_GRID = ((1, 128), (2, 64))
OPTIMIZERS = ("sgd", "adamw", "none")
# off | on (torch.compile the whole model and its loss, what "stock compiled" means) | layers (each decoder
# layer compiled on its own; the mask, the embeddings and the loss stay eager) | layers-tuned (the
# same, with Inductor's coordinate-descent tuning of its kernels' launch configurations: minutes
# more compile, worth it where a default configuration is far off, as in the float8 casts).
COMPILE_MODES = ("off", "on", "layers", "layers-tuned")
TUNED = {"coordinate_descent_tuning": True}
REGION_OPTIONS = {"layers": None, "layers-tuned": TUNED}  # the per-layer modes: their Inductor settings
# trainperf's fastest Llama step (`llama --fast`, `profile llama --fast`): the settings that
# measured fastest on the H100 (the seed-llama and peers suites, benchmarks/README.md): each decoder
# layer compiled (Inductor fuses norms, RoPE and residual adds there), the fused chunked loss, and
# where they run FlashAttention 4, quack's MLP with SwiGLU in its GEMMs' epilogues and the whole
# iteration replayed as a CUDA graph (recipe_setup).
FAST = {"loss": "chunked", "compile": "layers"}
INPUTS = ("embeds", "ids")
# How grouped-query K/V heads reach SDPA: native (the backend's own GQA, enable_gqa; expanded when
# the backend refuses it) | expanded (repeat_kv to one K/V head per query head first) | packed
# (FA4 only: each K/V head's query heads packed into one sequence, attention/fa4_packed.py).
KV_HEADS = ("native", "expanded", "packed")
# The swappable parts as they are named in a record's swaps, and the spec field of each.
SWAP_FIELDS = {"norm": "norm", "swiglu": "swiglu", "rope": "rope", "loss": "loss", "kv": "kv_heads",
               "gemm": "gemm", "library": "library", "float8": "float8", "graph": "graph"}
# Who computes the attention projections' products (forward and input gradient) and the chunked
# loss's LM-head products: torch (cuBLAS) | quack (quack's GEMM where a configuration tuned for the
# GPU is known, cuBLAS elsewhere: kernels/quack_gemm.py)
GEMMS = ("torch", "quack")
# How the timed iterations launch: off (kernel by kernel) | step (the whole iteration captured once
# as a CUDA graph and replayed, workloads/step_graph.py: the same kernels without the gaps between)
GRAPH_MODES = ("off", "step")
# Named setups (`llama --recipe`): the stock step, what users pick instead, and trainperf's own.
RECIPES: dict[str, dict[str, str]] = {
    "stock": {},
    "compile": {"compile": "on"},
    "liger": {"library": "liger"},
    "liger-compile": {"library": "liger", "compile": "on"},
    "fast": FAST,
    "fp8": {**FAST, "float8": "torchao", "compile": "layers-tuned"},
    # fp8 with torchao's float8 on the MLP alone, on the attention projections alone, or scaled per
    # row: which products, which scaling move its loss off stock's band (the float8-causes suite)
    **{f"fp8-{kind}": {**FAST, "float8": f"torchao-{kind}", "compile": "layers-tuned"}
       for kind in ("mlp", "attention", "rowwise")},
    # the same step with trainperf's own float8 (delayed scaling) instead of torchao's: on the MLP,
    # on every decoder Linear (the MLP and the attention projections), or on every Linear (the LM head too)
    "fp8-trainperf": {**FAST, "float8": "trainperf"},
    "fp8-trainperf-all": {**FAST, "float8": "trainperf-all"},
    "fp8-trainperf-head": {**FAST, "float8": "trainperf-head"},
    # trainperf's float8 on every decoder Linear and the attention on cuDNN's float8 graphs
    # (attention/cudnn_fp8.py)
    "fp8-trainperf-attn": {**FAST, "float8": "trainperf-all", "sdpa_backend": "CUDNN_FP8"},
    "fa4": {"sdpa_backend": "FA4"},  # the stock model with FlashAttention 4 as its attention
    "liger-fa4": {"library": "liger", "sdpa_backend": "FA4"},
}
# Recipes of trainperf's own that take FlashAttention 4 where it runs, the backend asked for elsewhere,
# and with it their timed iterations replayed as a CUDA graph; those that take quack's fused MLP
# where it runs (the float8 recipes' MLP GEMMs are float8 ones instead); and those that take quack's
# tuned GEMMs where picks for the GPU are known (torchao's float8 has the projections' products;
# under fp8-trainperf-all, whose projections are float8 ones, they take the LM head's alone).
FA4_WHERE_IT_RUNS = ("fast", "fp8", "fp8-mlp", "fp8-attention", "fp8-rowwise", "fp8-trainperf",
                     "fp8-trainperf-all", "fp8-trainperf-head")
QUACK_WHERE_IT_RUNS = ("fast",)
TUNED_GEMMS_WHERE_KNOWN = ("fast", "fp8-trainperf", "fp8-trainperf-all", "fp8-trainperf-attn")
# Recipes that, on FlashAttention 4, pack each K/V head's query heads into one sequence
# (--kv-heads packed) at sequences up to PACKED_UP_TO_SEQ: FA4's backward then keeps dK and dV of
# the four query heads in one program, 1.2x faster at 768 and 1024 tokens a sequence on an H100,
# slower at 8192 (docs/peers.md).
PACKED_WHERE_IT_PAYS = ("fast",)
PACKED_UP_TO_SEQ = 1024
# Recipes whose own attention (not FlashAttention 4) reads nothing on the host either, so that their
# timed iterations are replayed as a CUDA graph too
GRAPHED_WITH_OWN_ATTENTION = ("fp8-trainperf-attn",)


def recipe_setup(name: str, device: str, replayed: bool = True, seq: int | None = None) -> dict[str, str]:
    """The spec fields of recipe `name` on `device` at sequence length `seq` (a recipe that names
    an attention sets `sdpa_backend`; the others run with the backend asked for). `replayed=False`
    leaves the CUDA graph out, for callers that launch the iteration themselves (profiles need its
    launches to see ranges; parity feeds new batches each step) and for steps from token ids
    (validate): the graph replays the same kernels. The graph comes only with an attention whose
    step reads nothing on the host (FlashAttention 4's, GRAPHED_WITH_OWN_ATTENTION's); packed K/V
    heads only with FlashAttention 4, up to PACKED_UP_TO_SEQ."""
    from trainperf.attention.fa4 import fa4_runs
    from trainperf.kernels import quack_gemm
    from trainperf.kernels.quack_mlp import quack_runs

    dev = torch.device(device)
    setup = dict(RECIPES[name])
    if name in QUACK_WHERE_IT_RUNS and quack_runs(dev):
        setup["swiglu"] = "quack"
    if name in TUNED_GEMMS_WHERE_KNOWN and quack_gemm.tuned_here(dev):
        setup["gemm"] = "quack"
    if name in FA4_WHERE_IT_RUNS and fa4_runs(dev):
        setup["sdpa_backend"] = "FA4"
        if replayed:  # a graph needs trainperf's own attention (validate)
            setup["graph"] = "step"
        if name in PACKED_WHERE_IT_PAYS and seq is not None and seq <= PACKED_UP_TO_SEQ:
            setup["kv_heads"] = "packed"
    if name in GRAPHED_WITH_OWN_ATTENTION and replayed and dev.type == "cuda":
        setup["graph"] = "step"
    return setup


def with_kv_heads(setup: dict[str, str], kv_heads: str) -> dict[str, str]:
    """`setup` with the K/V-head mode asked for (--kv-heads), unless the setup picks its own (a
    recipe packing them), which only the default may leave to it."""
    if "kv_heads" not in setup:
        return {**setup, "kv_heads": kv_heads}
    if kv_heads != LlamaSpec.kv_heads:
        raise SpecError(f"the recipe sets --kv-heads {setup['kv_heads']} itself at sequences up to "
                        f"{PACKED_UP_TO_SEQ}; leave --kv-heads out, or run it at longer sequences")
    return setup


def recipe_forms(name: str) -> list[dict[str, str]]:
    """Every setup that recipe `name` may run as, its attention aside: its own, with quack's MLP
    where that runs (and with it quack's tuned GEMMs where those are known), each replayed as a
    CUDA graph where that runs, each with packed K/V heads where those pay."""
    forms = [RECIPES[name]]
    if name in QUACK_WHERE_IT_RUNS:
        forms += [{**form, "swiglu": "quack"} for form in forms]
    if name in TUNED_GEMMS_WHERE_KNOWN:  # tuned GEMMs run only where quack does, and its MLP with them
        forms += [{**form, "gemm": "quack"} for form in forms
                  if form.get("swiglu") == "quack" or name not in QUACK_WHERE_IT_RUNS]
    if name in FA4_WHERE_IT_RUNS or name in GRAPHED_WITH_OWN_ATTENTION:
        forms += [{**form, "graph": "step"} for form in forms]
    if name in PACKED_WHERE_IT_PAYS:
        forms += [{**form, "kv_heads": "packed"} for form in forms]
    return forms


def setup_spec(setup: dict[str, str], backend: str, **fields: Any) -> LlamaSpec:
    """The spec of `setup` (a recipe's fields) with the attention `backend` asked for, unless the
    setup names its own; `fields` override both."""
    return LlamaSpec(**{"sdpa_backend": backend, **setup, **fields})
# Phrases PyTorch uses when a pinned SDPA backend cannot take the call.
NO_KERNEL = ("No available kernel", "No viable backend")


@dataclass(frozen=True)
class LlamaSpec:
    sdpa_backend: str
    batch: int
    seq: int
    dtype: str = "bf16"  # the weights' own
    optimizer: str = "sgd"
    inputs: str = "embeds"
    compile: str = "off"  # one of COMPILE_MODES
    model: str = "llama-3.2-1b"  # a preset, a config.json or model folder, or a hub id
    layers: int | None = None
    device: str = "cuda"
    warmup: int = 5
    iters: int = 100
    norm: str = "torch"  # torch | fused (F.rms_norm) | triton (trainperf's) | cudnn (cuDNN frontend)
    swiglu: str = "torch"  # torch | triton
    rope: str = "torch"  # torch | triton
    loss: str = "torch"  # torch | chunked (LM head + cross-entropy without full fp32 logits)
    kv_heads: str = "native"  # one of KV_HEADS
    gemm: str = "torch"  # one of GEMMS
    library: str = "none"  # a kernel library patched in (models/peers.py)
    float8: str = "off"  # float8 training of the decoder's linear layers (models/peers.py)
    graph: str = "off"  # one of GRAPH_MODES

    def swap_names(self) -> list[str]:
        """trainperf's changes to the stock step as `part=choice` (a part off its default, the
        stock choice); none for the stock model."""
        stock = self.__dataclass_fields__
        return [f"{name}={getattr(self, f)}" for name, f in SWAP_FIELDS.items()
                if getattr(self, f) != stock[f].default]

    def label(self) -> str:
        swaps = "".join(f" {name}" for name in self.swap_names())
        return f"{self.sdpa_backend} {self.batch}x{self.seq}{COMPILED_LABELS[self.compile]}{swaps}"


def validate(spec: LlamaSpec) -> None:
    check_choice("sdpa_backend", spec.sdpa_backend, hf_llama.BACKENDS)
    check_positive(spec, "batch", "seq", "iters")
    check_non_negative(spec, "warmup")
    check_choice("optimizer", spec.optimizer, OPTIMIZERS)
    check_choice("inputs", spec.inputs, INPUTS)
    check_choice("dtype", spec.dtype, DTYPES)
    check_choice("compile", spec.compile, COMPILE_MODES)
    if spec.compile != "off":
        check_compiler(torch.device(spec.device))
    check_choice("norm", spec.norm, hf_llama.NORM_SWAPS)
    check_choice("swiglu", spec.swiglu, hf_llama.SWIGLU_SWAPS)
    check_choice("rope", spec.rope, hf_llama.SWAPS)
    check_choice("loss", spec.loss, LOSSES)
    check_choice("kv-heads", spec.kv_heads, KV_HEADS)
    check_choice("gemm", spec.gemm, GEMMS)
    if spec.kv_heads == "packed" and spec.sdpa_backend != "FA4":
        raise SpecError("--kv-heads packed runs on FlashAttention 4 (--sdpa-backend FA4), not "
                        f"{spec.sdpa_backend}")
    check_choice("library", spec.library, peers.LIBRARIES)
    check_choice("float8", spec.float8, peers.FLOAT8)
    check_choice("graph", spec.graph, GRAPH_MODES)
    if spec.graph != "off":
        _check_capturable(spec)
    if spec.float8 in peers.TRAINPERF_FLOAT8 and spec.swiglu != "torch":
        raise SpecError(f"--float8 {spec.float8} computes SwiGLU in its own float8 MLP; leave --swiglu "
                        "at torch")
    peers.check_float8_loss(spec.float8, spec.loss)
    if spec.library != "none" and spec.loss != "torch":
        raise SpecError(f"--library {spec.library} brings its own loss; leave --loss at torch")
    try:
        cfg = hf_llama.load_config(spec.model, spec.layers)
    except (ValueError, OSError) as exc:
        raise SpecError(str(exc).splitlines()[0]) from None
    if spec.device == "cpu":
        h, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
        params = 2 * cfg.vocab_size * h + layers * (4 * h * h + 3 * h * inter)
        scores = spec.batch * cfg.num_attention_heads * spec.seq**2 * 2
        check_fits(training_step_bytes(params, spec.batch * spec.seq, 12 * h + 3 * inter, layers,
                                       cfg.vocab_size, scores), f"a Llama step at {spec.batch}x{spec.seq}")


def _check_capturable(spec: LlamaSpec) -> None:
    """SpecError unless a CUDA graph can hold `spec`'s step: on a GPU, trainperf's own attention,
    input embeddings."""
    if spec.device != "cuda":
        raise SpecError(f"graph={spec.graph} replays a CUDA graph: it needs a CUDA GPU, not {spec.device}")
    if spec.sdpa_backend not in hf_llama.OWN_BACKENDS:
        raise SpecError(f"graph={spec.graph} needs one of trainperf's own attentions "
                        f"({', '.join(hf_llama.OWN_BACKENDS)}): on PyTorch's SDPA path transformers reads "
                        "the attention mask on the host, which no CUDA graph can hold")
    if spec.inputs != "embeds":
        raise SpecError(f"graph={spec.graph} replays the step from input embeddings, the only inputs it "
                        "was captured from here: run --inputs ids without the graph")


def _no_kernel(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and any(p in str(exc) for p in NO_KERNEL)


class LlamaStep:
    """The model, its inputs and one training iteration, built once per case."""

    def __init__(self, spec: LlamaSpec, device: torch.device, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.cfg = hf_llama.load_config(spec.model, spec.layers)
        self.model = hf_llama.build_model(self.cfg, DTYPES[spec.dtype], device)
        hf_llama.apply_swaps(self.model, spec.norm, spec.swiglu, spec.rope, spec.gemm)
        if spec.kv_heads == "packed":
            hf_llama.pack_query_heads(self.model)
        self.swaps = spec.swap_names()
        self.undo: list = []  # what close() takes back out of transformers
        self.hidden_loss = (functools.partial(chunked_lm_loss, tuned=spec.gemm == "quack")
                            if spec.loss == "chunked" else None)
        if spec.library == "liger":
            undo, self.hidden_loss = peers.apply_liger(self.model)
            self.undo.append(undo)
        if spec.float8 in peers.TORCHAO_FLOAT8:
            peers.apply_float8(self.model, spec.float8)
        if spec.float8 in peers.TRAINPERF_FLOAT8:
            hf_llama.float8_layers(self.model, attention=spec.float8 != "trainperf")
        if spec.float8 == "trainperf-head":
            from trainperf.kernels.float8_head import float8_chunked_lm_loss, head_state

            self.hidden_loss = functools.partial(float8_chunked_lm_loss,
                                                 state=head_state(self.model.lm_head.weight))
        if spec.compile != "off":
            torch._dynamo.reset()  # each case compiles afresh: no graphs or dynamic shapes of earlier cases
        # Compiled whole, the model and PyTorch's cross-entropy are one graph, as they are where
        # transformers computes the loss from labels inside the forward: Inductor fuses the full
        # logits' softmax and its gradient (docs/peers.md). A loss from the hidden states (Liger's, the
        # chunked one) brings its own kernels and stays outside the graph.
        self.forward = self.model.model if self.hidden_loss else self.model
        self.loss_of = self.forward_and_loss
        if spec.compile == "on" and self.hidden_loss:
            self.forward = torch.compile(self.forward)
        elif spec.compile == "on":
            self.loss_of = torch.compile(self.loss_of)
        self.reads_mask = spec.compile != "on"  # compiled whole, it could only build the full mask
        if spec.compile in REGION_OPTIONS:
            compile_regions(hf_llama.compile_targets(self.model), REGION_OPTIONS[spec.compile])
        params = self.model.parameters()
        self.opt = {"sgd": lambda: torch.optim.SGD(params, lr=1e-6),
                    "adamw": lambda: torch.optim.AdamW(params, lr=1e-6),
                    "none": lambda: None}[spec.optimizer]()
        b, n, vocab = spec.batch, spec.seq, self.cfg.vocab_size
        if spec.inputs == "embeds":
            self.inputs = {"inputs_embeds": torch.randn(b, n, self.cfg.hidden_size, device=device,
                                                        dtype=DTYPES[spec.dtype])}
        else:
            self.inputs = {"input_ids": torch.randint(0, vocab, (b, n), device=device)}
        self.inputs["attention_mask"] = torch.ones(b, n, dtype=torch.long, device=device)
        self.targets = torch.randint(0, vocab, (b, n), device=device)

    def __call__(self, phase: Phase = no_phase) -> torch.Tensor:
        """One iteration; `phase(name)` wraps forward, backward and optimizer."""
        loss = self.forward_pass(phase)
        self.model.zero_grad(set_to_none=True)
        with phase("backward"):
            loss.backward()
        if self.opt is not None:
            with phase("optimizer"):
                self.opt.step()
        return loss

    def forward_pass(self, phase: Phase = no_phase) -> torch.Tensor:
        """The training forward pass and the loss, without the backward."""
        with phase("forward"):
            return self.loss_of(self.inputs, self.targets)

    def forward_and_loss(self, inputs: dict[str, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        """The model's forward from `inputs` and its loss against `targets`; a loss from the hidden
        states stops the model there (no full logits)."""
        if self.hidden_loss:
            hidden = self.forward(**inputs).last_hidden_state
            return self.hidden_loss(hidden.flatten(0, 1), self.model.lm_head.weight, targets.flatten())
        logits = self.forward(**inputs).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def close(self) -> None:
        """Take back what this case patched into transformers (the next case starts stock)."""
        while self.undo:
            self.undo.pop()()

    def matmul_params(self) -> int:
        return sum(m.weight.numel() for m in self.model.modules() if isinstance(m, torch.nn.Linear))


def choose_kv_mode(step: LlamaStep, backend: str, kv_heads: str = "native") -> str:
    """Run one iteration with K/V heads as asked; native falls back to expanded where the backend
    refuses GQA. Returns the mode that ran."""
    if kv_heads == "packed":  # the layers read it themselves (hf_llama.pack_query_heads)
        hf_llama.set_attention(step.model, hf_llama.attention_name(backend, False, step.reads_mask))
        step()
        return kv_heads
    refusals = []
    for expand in (False, True)[KV_HEADS.index(kv_heads):]:
        hf_llama.set_attention(step.model, hf_llama.attention_name(backend, expand, step.reads_mask))
        try:
            with warnings.catch_warnings():  # a refusal is recorded below; its warning is noise
                warnings.filterwarnings("ignore", message=".*require query, key and value to have the same")
                step()
            return "expanded" if expand else "native"
        except RuntimeError as exc:
            if not _no_kernel(exc):
                raise
            refusals.append(str(exc).strip().splitlines()[0])
    also = " (also with K/V heads expanded)" if len(refusals) > 1 else " (K/V heads expanded)"
    raise Unsupported(f"{backend}: {refusals[0]}{also}")


def recipe_step(name: str, batch: int, seq: int, device: str = "cuda", backend: str = "CUDNN_ATTENTION",
                prepare: Callable[[LlamaStep], None] | None = None, **fields: Any) -> LlamaStep:
    """Recipe `name`'s step at batch × seq, built and run once with its attention chosen, for
    callers that launch or capture it themselves (probes): the recipe as `llama` runs it, without
    the CUDA graph; `fields` override the recipe's. `prepare(step)` may change the model before
    its first iteration compiles it."""
    setup = {k: v for k, v in recipe_setup(name, device, replayed=False, seq=seq).items() if k not in fields}
    spec = setup_spec(setup, backend, batch=batch, seq=seq, device=device, **fields)
    validate(spec)
    step = LlamaStep(spec, torch.device(device))
    if prepare is not None:
        prepare(step)
    choose_kv_mode(step, spec.sdpa_backend, spec.kv_heads)
    return step


def attention_ops_seen(step: LlamaStep) -> list[str]:
    """The aten SDPA ops one iteration really dispatched to, read from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sorted({e.key for e in prof.key_averages() if e.key.startswith("aten::_scaled_dot_product")
                   or e.key.startswith("aten::_flash_attention") or e.key.startswith("aten::_efficient")
                   or e.key.startswith("aten::_cudnn_attention")
                   or e.key in (*hf_llama.BACKEND_OPS.values(), hf_llama.PACKED_OP)})


def measure_llama(spec: LlamaSpec) -> dict[str, Any]:
    step = LlamaStep(spec, torch.device(spec.device))
    try:
        return _measure(spec, step)
    finally:
        step.close()


def _measure(spec: LlamaSpec, step: LlamaStep) -> dict[str, Any]:
    device = torch.device(spec.device)
    kv_mode = choose_kv_mode(step, spec.sdpa_backend, spec.kv_heads)
    ops = attention_ops_seen(step)
    expected = hf_llama.attention_op(spec.sdpa_backend, spec.kv_heads)
    decomposed = spec.sdpa_backend == "MATH" and spec.compile != "off" and not ops  # compiled into matmuls
    if not (decomposed or any(op.startswith(expected) for op in ops)):
        raise RuntimeError(f"{spec.sdpa_backend} was asked for but the profiler saw {ops or 'no SDPA op'}")
    run, capture_peak = (_graphed(step, device) if spec.graph == "step" else (step, 0))
    for _ in range(max(spec.warmup - 2, 0)):  # two iterations already ran above
        run()
    timer = PhaseTimer(device)
    start_measured_window(device)
    with GpuMonitor(device) as monitor:
        for _ in range(spec.iters):
            with timer.phase("iter"):
                loss = run()
        samples = timer.samples()["iter"]  # waits for the GPU, inside the monitored window
    s = summarize([ms / 1e3 for ms in samples])
    tokens = spec.batch * spec.seq
    d_attn = step.cfg.num_attention_heads * getattr(step.cfg, "head_dim", step.cfg.hidden_size
                                                    // step.cfg.num_attention_heads)
    mode = "train" if spec.optimizer != "none" else "forward-backward"
    flops = transformer_flops(step.matmul_params(), step.cfg.num_hidden_layers, d_attn, spec.seq,
                              tokens, causal=True, mode=mode)
    keys = ("mean", "median", "std", "iqr", "min", "cv", "n")
    metrics: dict[str, Any] = {f"iter_s_{k}": s[k] for k in keys}
    metrics.update(tokens_per_s=tokens / s["mean"], tflops=flops / s["mean"] / 1e12,
                   kv_heads=kv_mode, sdpa_ops=",".join(ops), loss=float(loss.detach()),
                   swaps=",".join(step.swaps) or "none",
                   params_m=round(sum(p.numel() for p in step.model.parameters()) / 1e6, 1))
    if device.type == "cuda":
        metrics["peak_mem_gb"] = max(torch.cuda.max_memory_allocated(device), capture_peak) / 2**30
    metrics.update(monitor.metrics())
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_tflops(gpu, spec.dtype)
    if peak:
        metrics["mfu"] = metrics["tflops"] / peak
    metrics.update(limits(metrics["tflops"], peak, gpu, metrics.get("sm_clock_mhz"),
                          float8=spec.float8 != "off"))
    if "energy_j" in metrics:  # the window is the timed iterations: under the power cap, time follows it
        metrics["iter_energy_j"] = metrics["energy_j"] / spec.iters
    return metrics


def _graphed(step: LlamaStep, device: torch.device) -> tuple[GraphedIteration, int]:
    """The iteration captured as a CUDA graph, and the peak memory (bytes) of capturing it: replays
    allocate nothing, so the step's working set shows only there."""
    torch.cuda.empty_cache()  # the eager iterations' cached blocks: the graph keeps a pool of its own
    torch.cuda.reset_peak_memory_stats(device)
    graphed = GraphedIteration(step)
    return graphed, torch.cuda.max_memory_allocated(device)


CSV_COLUMNS = ["backend", "batch_size", "seq_len", "mean_s", "median_s", "std_s", "iters", "tokens_per_s",
               "tflops", "peak_mem_gb", "energy_j_per_iter", "status", "speedup", "vs_best_stock", "kv_heads",
               "swaps", "recipe", "reason", "gpu", "gpu_uuid", "torch", "cuda", "cudnn", "sm_clock_mhz",
               "power_w", "clock_reasons", "dtype", "compile", "inputs", "optimizer", "layers"]


_METRIC_COLUMNS = {"mean_s": "iter_s_mean", "median_s": "iter_s_median", "std_s": "iter_s_std",
                   "iters": "iter_s_n", "tokens_per_s": "tokens_per_s", "tflops": "tflops",
                   "peak_mem_gb": "peak_mem_gb", "kv_heads": "kv_heads", "swaps": "swaps",
                   "sm_clock_mhz": "sm_clock_mhz", "power_w": "power_w", "clock_reasons": "clock_reasons",
                   "energy_j_per_iter": "iter_energy_j"}


COMPILED_LABELS = {"off": "", "on": " compiled", "layers": " compiled per layer",
                   "layers-tuned": " compiled per layer, tuned"}


def compile_mode(value: bool | str) -> str:
    """The compile mode of a record; stores written before the modes had True/False."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else str(value)


def backend_label(backend: str) -> str:
    return backend.replace("_ATTENTION", "").lower()


def setup_label(backend: str, compile: str, swaps: str) -> str:
    """Short name of one configuration for plots and the summary: backend, how it was compiled,
    trainperf's swaps (named, so setups that differ only in their swaps stay apart)."""
    label = backend_label(backend) + COMPILED_LABELS[compile_mode(compile)]
    if swaps and swaps != "none":
        label += f" + {swaps}"
    return label


# The spec fields a recipe sets (the CLI refuses them beside --recipe), its attention aside.
SETUP_FIELDS = ("compile", "norm", "swiglu", "rope", "loss", "gemm", "library", "float8", "graph", "kv_heads")


def recipe_of(spec: dict[str, Any]) -> str | None:
    """The recipe whose setup `spec` is, in any of its forms, whether or not its case ran; None if
    none: its setup fields are the form's and the rest at their defaults, its attention the form's
    where the form names one. Where two recipes match, the later one names it (stock on FA4 is fa4).
    A recipe run with K/V heads it does not pick itself (--kv-heads) is named with them, e.g.
    "fp8 + kv-heads packed": its row is neither the recipe's own nor nameless."""
    named = _recipe_of(spec)
    kv = spec.get("kv_heads", LlamaSpec.kv_heads)
    if named is None and kv != LlamaSpec.kv_heads:
        named = _recipe_of({**spec, "kv_heads": LlamaSpec.kv_heads})
        return None if named is None else f"{named} + kv-heads {kv}"
    return named


def _recipe_of(spec: dict[str, Any]) -> str | None:
    defaults = {k: getattr(LlamaSpec, k) for k in SETUP_FIELDS}
    setup = {**defaults, **{k: spec[k] for k in SETUP_FIELDS if k in spec}}
    setup["compile"] = compile_mode(setup["compile"])
    backend = spec.get("sdpa_backend")
    named = None
    for name in RECIPES:
        for form in recipe_forms(name):
            own = {**defaults, **{k: v for k, v in form.items() if k != "sdpa_backend"}}
            if own == setup and form.get("sdpa_backend", backend) == backend:
                named = name
    return named


def recipe_names(df: pd.DataFrame) -> list[str | None]:
    """The recipe each row of a timing table ran as: its `recipe` column; in a table written before
    it had one, matched from the setup that ran (backend, compile, swaps), which names only rows
    that ran."""
    if "recipe" in df:
        return [None if pd.isna(name) else name for name in df.recipe]
    specs = [(name, setup_spec(setup, backend, batch=1, seq=1))
             for backend in sorted(set(df.backend)) for name in RECIPES for setup in recipe_forms(name)]
    label = {setup_label(s.sdpa_backend, s.compile, ",".join(s.swap_names()) or "none"): name
             for name, s in specs}
    ran = df.status == "ok"
    swaps = df.swaps.astype(object).fillna("none")
    return [label.get(setup_label(b, c, s)) if ok else None
            for b, c, s, ok in zip(df.backend, df.compile, swaps, ran, strict=True)]


def _stock(df: pd.DataFrame) -> pd.Series:
    """Rows of the stock model: no trainperf swaps, eager or whole-model compiled."""
    return df.swaps.isin(["none", None]) & df.compile.isin(["off", "on"])


def _ok_by_setup(df: pd.DataFrame, by_recipe: bool = False) -> pd.DataFrame:
    """The rows that ran, with their shape (`case`, e.g. 1x16384) and setup label: with `by_recipe`,
    the recipe's name where one names it (and its backend where it ran on several), whichever form
    it took at each shape."""
    ok = df[df.status == "ok"].assign(case=lambda d: d.batch_size.astype(str) + "x" + d.seq_len.astype(str))
    labels = [setup_label(*row) for row in zip(ok.backend, ok.compile, ok.swaps, strict=True)]
    if by_recipe:
        names = pd.Series(recipe_names(ok), index=ok.index)
        backends = ok.backend.groupby(names).nunique()
        labels = [label if pd.isna(name) else name + (f" ({backend_label(b)})" if backends[name] > 1 else "")
                  for label, name, b in zip(labels, names, ok.backend, strict=True)]
    return ok.assign(setup=labels)


def timing_table(records: list[Record], baseline: str = "EFFICIENT_ATTENTION") -> pd.DataFrame:
    """The training_timing.csv table, one row per case, with two speed-ups per (batch, seq):
    `speedup` over the stock eager `baseline` backend, and `vs_best_stock` over the fastest stock
    row (no swaps; any backend, eager or whole-model compiled) of the same shape."""
    rows = []
    for r in records:
        row = {"backend": r.spec["sdpa_backend"], "batch_size": r.spec["batch"], "seq_len": r.spec["seq"],
               "status": r.status, "reason": r.reason, "gpu": r.env.get("gpu_name") or "cpu",
               "dtype": r.spec["dtype"], "compile": compile_mode(r.spec["compile"]),
               "recipe": recipe_of(r.spec),
               **{k: r.spec.get(k) for k in ("inputs", "optimizer", "layers")}}
        row.update({col: r.metrics.get(key) for col, key in _METRIC_COLUMNS.items()})
        row.update({col: r.env.get(col) for col in ("gpu_uuid", "torch", "cuda", "cudnn")})
        rows.append(row)
    df = pd.DataFrame(rows, columns=[c for c in CSV_COLUMNS if c not in ("speedup", "vs_best_stock")])
    stock = (df.status == "ok") & _stock(df)
    shape = ["batch_size", "seq_len"]
    bases = (df[stock & (df.backend == baseline) & (df.compile == "off")].groupby(shape)["mean_s"].first(),
             df[stock].groupby(shape)["mean_s"].min())
    for col, base in zip(("speedup", "vs_best_stock"), bases, strict=True):
        df.insert(CSV_COLUMNS.index(col), col, [base.get((b, n), float("nan")) / t if t else float("nan")
                                                for b, n, t in zip(df.batch_size, df.seq_len, df.mean_s,
                                                                   strict=True)])
    return df


def summary_table(df: pd.DataFrame, by_recipe: bool = False) -> pd.DataFrame:
    """One row per shape: each of trainperf's setups (per-layer compile or swaps) as a speed-up over
    the best stock row of that shape, first (the answer, kept where a terminal is narrow), then
    seconds per iteration of every setup (named by recipe with `by_recipe`). attrs["against"]
    says what the speed-ups are over: "the best stock row", or with `by_recipe` the recipes those
    stock rows ran ("the best of stock, compile, fa4": none swaps a kernel in); attrs["title"] says
    it, or that no stock row ran to compare against."""
    ok = _ok_by_setup(df, by_recipe)
    stock = _stock(ok)
    times = ok.pivot_table(index="case", columns="setup", values="mean_s", aggfunc="first", sort=False)
    named = recipe_names(ok[stock]) if by_recipe else [None]
    against = (f"the best of {', '.join(n for n in RECIPES if n in named)}" if named and None not in named
               else "the best stock row")
    gains = ok[~stock].pivot_table(index="case", columns="setup", values="vs_best_stock",
                                   aggfunc="first", sort=False).add_suffix(" speed-up")
    table = times.join(gains)[[*gains.columns, *times.columns]].rename_axis("shape").reset_index()
    table.attrs["against"] = against
    table.attrs["title"] = (f"speed-up over {against} of each shape; seconds per iteration"
                            if len(gains.columns) else
                            "seconds per iteration of each shape (no stock row ran to compare against)")
    return table


def write_outputs(df: pd.DataFrame, out, baseline: str, plots: bool = True, by_recipe: bool = False) -> list:
    """training_timing.csv, and with `plots` iteration_time.png and speedup.png (bars named by recipe
    with `by_recipe`), in folder `out`."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "training_timing.csv", out / "iteration_time.png", out / "speedup.png"]
    df.to_csv(paths[0], index=False)
    if not plots:
        return paths[:1]
    from trainperf.core.plots import grouped_bars

    ok, hue = _ok_by_setup(df, by_recipe), "setup"
    if by_recipe:  # the bars' labels under a legend titled recipe
        ok, hue = ok.assign(recipe=ok.setup), "recipe"
    gpu = ", ".join(sorted(set(df.gpu.dropna())))
    grouped_bars(ok, "case", hue, "mean_s", paths[1], "mean seconds per iteration (lower is better)",
                 title=f"Llama training iteration, {gpu}")
    grouped_bars(ok.dropna(subset=["speedup"]), "case", hue, "speedup", paths[2],
                 f"speed-up over {baseline}", title=f"SDPA backend speed-up, {gpu}", reference_line=1.0)
    return paths
