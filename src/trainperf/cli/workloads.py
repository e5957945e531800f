"""Workload commands: step, attention, llama."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import typer

from trainperf.cli.common import (
    DbOpt,
    DeviceOpt,
    JsonOpt,
    KvHeadsOpt,
    LossOpt,
    OutOpt,
    QuietOpt,
    RerunOpt,
    RopeOpt,
    SwigluOpt,
    app,
    batch_seq_pair,
    check_out_dir,
    cli_errors,
    console,
    device_or_fail,
    err_console,
    frame_table,
    run_and_show,
    step_parts,
    with_defaults,
)
from trainperf.core import report
from trainperf.core.errors import SpecError
from trainperf.core.record import Record
from trainperf.core.spec import on_off, parse_list, parse_one, positive_int, sweep
from trainperf.core.store import to_frame

STEP_COLUMNS: list[report.Column] = [
    ("size", report.spec("size")), ("ctx", report.spec("context")), ("bs", report.spec("batch")),
    ("prec", report.spec("precision")), ("compile", report.spec("compile")),
    ("mode", report.spec("mode")), ("swaps", lambda r: _step_swaps(r.spec)),
    ("fwd ms", report.timing("forward")), ("bwd ms", report.timing("backward")),
    ("opt ms", report.timing("optimizer")), ("step ms", report.timing("step")),
    ("tok/s", report.metric("tokens_per_s", 4)), ("TFLOP/s", report.metric("tflops")),
    ("MFU", report.metric("mfu", 2, 100.0)), ("peak GB", report.metric("peak_mem_gb")),
    *report.GPU_STATE, ("status", report.status), ("notes", report.notes),
]


STOCK_PARTS = {"attention": "sdpa", "norm": "torch", "rope": "torch", "swiglu": "torch", "loss": "torch"}


def _step_swaps(spec: dict) -> str:
    """The parts of a step case that are not the stock ones, e.g. 'norm=triton loss=chunked'."""
    return " ".join(f"{k}={spec[k]}" for k, v in STOCK_PARTS.items() if spec.get(k, v) != v) or "none"


@app.command()
@cli_errors
def step(
    size: str = typer.Option(None, help="Presets, comma-separated: tiny,small,medium,large,xl,2.7B."),
    context: str = typer.Option(None, help="Context lengths, comma-separated."),
    batch: str = typer.Option(None, help="Batch sizes, comma-separated."),
    precision: str = typer.Option(None, help="fp32,bf16,fp16 (autocast; fp16 with a grad scaler)."),
    compile: str = typer.Option("off", help="torch.compile: off,on."),
    mode: str = typer.Option("train", help="train | forward | forward-backward (comma list ok)."),
    attention: str = typer.Option("sdpa", help="Attention implementation(s) by name."),
    norm: str = typer.Option("torch", help="RMSNorm implementation(s): torch,fused,triton,cudnn."),
    rope: str = typer.Option("torch", help="RoPE implementation(s): torch,triton."),
    swiglu: str = typer.Option("torch", help="SwiGLU activation implementation(s): torch,triton."),
    loss: str = typer.Option("torch", help="Loss: torch (full logits) | chunked (LM head + CE in chunks)."),
    tf32: str = typer.Option("on", help="TF32 matmuls for fp32: on | off."),
    warmup: int = typer.Option(None, help="Warm-up steps (not measured)."),
    steps: int = typer.Option(None, help="Measured steps."),
    vocab: int = typer.Option(10_000, help="Vocabulary size."),
    d_model: int = typer.Option(None, help="Override the preset's d_model."),
    d_ff: int = typer.Option(None, help="Override the preset's d_ff."),
    layers: int = typer.Option(None, help="Override the preset's number of layers."),
    heads: int = typer.Option(None, help="Override the preset's number of heads."),
    peak_tflops: float = typer.Option(None, help="Peak TFLOP/s for MFU (default: known-GPU table)."),
    device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt, quiet: bool = QuietOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Time forward, backward and optimizer steps of the GPT-style LM across a sweep."""
    from trainperf.models.presets import PRESETS
    from trainperf.workloads.step import MODES, StepSpec, measure_step, validate

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    defaults = ({"size": "small,medium,large", "context": "256,512,1024", "batch": "4",
                 "precision": "bf16", "warmup": 5, "steps": 10} if gpu else
                {"size": "tiny", "context": "64,128", "batch": "4", "precision": "fp32",
                 "warmup": 2, "steps": 5})
    opts = with_defaults(defaults, size=size, context=context, batch=batch, precision=precision,
                         warmup=warmup, steps=steps)
    axes = sweep(
        size=parse_list(opts["size"], str, "--size", PRESETS),
        context=parse_list(opts["context"], positive_int, "--context"),
        batch=parse_list(opts["batch"], positive_int, "--batch"),
        precision=parse_list(opts["precision"], str, "--precision", ("fp32", "bf16", "fp16")),
        compile=parse_list(compile, on_off, "--compile"),
        mode=parse_list(mode, str, "--mode", MODES),
        **{k: parse_list(given, str, f"--{k}", choices) for (k, choices), given in
           zip(step_parts().items(), (attention, norm, rope, swiglu, loss), strict=True)},
    )
    if peak_tflops is not None and not (math.isfinite(peak_tflops) and peak_tflops > 0):
        raise SpecError(f"--peak-tflops must be a positive number, got {peak_tflops}")
    common = {"device": dev.type if dev.index is None else str(dev),
              "tf32": parse_one(tf32, on_off, "--tf32"),
              "vocab": vocab, "warmup": opts["warmup"], "steps": opts["steps"], "d_model": d_model,
              "d_ff": d_ff, "n_layers": layers, "n_heads": heads}
    specs = [StepSpec.from_preset(a.pop("size"), **a, **common) for a in axes]
    for s in specs:
        validate(s)
    run_and_show("step", specs, functools.partial(measure_step, peak_override=peak_tflops),
                 STEP_COLUMNS, db=db, device=dev, rerun=rerun, quiet=quiet, as_json=as_json,
                 title="trainperf step")


ATTENTION_COLUMNS: list[report.Column] = [
    ("impl", report.spec("impl")), ("mode", report.spec("mode")), ("b", report.spec("batch")),
    ("h", report.spec("heads")), ("seq", report.spec("seq")), ("d", report.spec("head_dim")),
    ("dtype", report.spec("dtype")), ("causal", report.spec("causal")),
    ("time ms", report.timing("time")), ("TFLOP/s", report.metric("tflops")),
    ("peak MB", report.metric("peak_mem_mb", 4)), *report.GPU_STATE, ("status", report.status),
    ("notes", report.notes),
]


@app.command()
@cli_errors
def attention(
    impl: str = typer.Option(None, help="Implementations, comma-separated, or 'all'."),
    head_dim: str = typer.Option(None, help="Head dims, comma-separated."),
    seq: str = typer.Option(None, help="Sequence lengths, comma-separated."),
    batch: int = typer.Option(None, help="Batch size."),
    heads: int = typer.Option(16, help="Number of heads."),
    dtype: str = typer.Option(None, help="fp32,fp16,bf16."),
    mode: str = typer.Option("fwd+bwd", help="fwd,bwd,fwd+bwd."),
    causal: str = typer.Option("on", help="Causal masking: on,off."),
    warmup: int = typer.Option(5, help="Untimed calls first."),
    reps: int = typer.Option(20, help="Timed calls."),
    out: Path = OutOpt, device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
) -> None:
    """Time attention implementations (forward, backward) and their peak memory."""
    from trainperf.attention.registry import NAMES
    from trainperf.workloads.attention import MODES, AttentionSpec, measure_attention, validate

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    defaults = ({"impl": "all", "head_dim": "64", "seq": "256,1024,4096", "batch": 8, "dtype": "bf16"}
                if gpu else {"impl": "naive,sdpa,sdpa-math,torch-fa2", "head_dim": "32",
                             "seq": "128,256", "batch": 1, "dtype": "fp32"})
    opts = with_defaults(defaults, impl=impl, head_dim=head_dim, seq=seq, batch=batch, dtype=dtype)
    impls = opts["impl"]
    pinned = [n for n in NAMES if n != "sdpa"]
    axes = sweep(
        impl=pinned if impls == "all" else parse_list(impls, str, "--impl", NAMES),
        head_dim=parse_list(opts["head_dim"], positive_int, "--head-dim"),
        seq=parse_list(opts["seq"], positive_int, "--seq"),
        dtype=parse_list(opts["dtype"], str, "--dtype", ("fp32", "fp16", "bf16")),
        mode=parse_list(mode, str, "--mode", MODES),
        causal=parse_list(causal, on_off, "--causal"),
    )
    specs = [AttentionSpec(batch=opts["batch"], heads=heads, device=dev.type,
                           warmup=warmup, reps=reps, **a) for a in axes]
    for s in specs:
        validate(s)
    check_out_dir(out)
    records = run_and_show("attention", specs, measure_attention, ATTENTION_COLUMNS, db=db,
                           device=dev, rerun=rerun, quiet=quiet, as_json=as_json,
                           title="trainperf attention")
    _attention_plots(records, out, quiet or as_json)


def _attention_plots(records: list[Record], out: Path, quiet: bool) -> None:
    """Time and peak memory against sequence length, one figure per (mode, head dim, dtype)."""
    from trainperf.core.plots import line_grid

    df = to_frame(r for r in records if r.status == "ok")
    if df.empty:
        return
    out.mkdir(parents=True, exist_ok=True)
    panels = [("time_ms_median", "median time (ms)")]
    if "peak_mem_mb" in df:
        panels.append(("peak_mem_mb", "peak memory (MB)"))
    for (mode, hd, dt), group in df.groupby(["mode", "head_dim", "dtype"]):
        path = out / f"attention_{mode.replace('+', '_')}_d{hd}_{dt}.png"
        line_grid(group, "seq", panels, "impl", path, title=f"attention {mode}, head dim {hd}, {dt}")
        if not quiet:
            err_console.print(f"wrote {path}")


LLAMA_COLUMNS: list[report.Column] = [
    ("backend", report.spec("backend")), ("batch", report.spec("batch")), ("seq", report.spec("seq")),
    ("s/iter mean", report.metric("iter_s_mean")), ("median", report.metric("iter_s_median")),
    ("std", report.metric("iter_s_std", 2)), ("tok/s", report.metric("tokens_per_s", 4)),
    ("TFLOP/s", report.metric("tflops")), ("peak GB", report.metric("peak_mem_gb")),
    ("K/V heads", report.metric("kv_heads")), ("compiled", report.spec("compile")),
    ("swaps", report.metric("swaps")), *report.GPU_STATE, ("status", report.status), ("notes", report.notes),
]


@app.command()
@cli_errors
def llama(
    batch_seq: str = typer.Option(None, help="Batch x sequence pairs, e.g. 1x16384,2x8192."),
    backend: str = typer.Option(None, help="SDPA backends: CUDNN_ATTENTION,EFFICIENT_ATTENTION,"
                                           "FLASH_ATTENTION,MATH."),
    iters: int = typer.Option(None, help="Timed iterations (default 100 on a GPU)."),
    warmup: int = typer.Option(5, help="Untimed iterations first."),
    optimizer: str = typer.Option("sgd", help="sgd | adamw | none."),
    inputs: str = typer.Option("embeds", "--input", help="embeds (random input embeddings) | ids."),
    compile: str = typer.Option("off", help="torch.compile: off,on (the whole model),layers (each decoder "
                                            "layer on its own)."),
    dtype: str = typer.Option("bf16", help="Weight dtype: bf16 | fp16 | fp32."),
    layers: int = typer.Option(None, help="Use only this many decoder layers (quick runs)."),
    preset: str = typer.Option(None, help="Shipped config: llama-3.2-1b (GPU default) | tiny (CPU default)."),
    config: str = typer.Option(None, help="A local config.json or model folder instead of a preset."),
    model: str = typer.Option(None, help="A hub model id (the only option that uses the network)."),
    baseline: str = typer.Option(None, help="Backend that speed-ups are relative to."),
    norm: str = typer.Option("torch", help="RMSNorm: torch (transformers') | fused (F.rms_norm) | triton "
                                           "(trainperf's) | cudnn (cuDNN frontend)."),
    swiglu: str = SwigluOpt, rope: str = RopeOpt, loss: str = LossOpt, kv_heads: str = KvHeadsOpt,
    fast: bool = typer.Option(False, "--fast", help="Also run trainperf's fastest step (its best swaps and "
                                                    "compile mode) with the first backend, beside the "
                                                    "other rows."),
    out: Path = OutOpt, device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
) -> None:
    """Time a random-init Llama training iteration across SDPA backends and batch x seq pairs."""
    from trainperf.models.hf_llama import BACKENDS
    from trainperf.workloads.llama_sdpa import (
        COMPILE_MODES,
        CPU_GRID,
        DEFAULT_GRID,
        FAST,
        KV_HEADS,
        LlamaSpec,
        measure_llama,
        summary_table,
        timing_table,
        validate,
        write_outputs,
    )

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    grid = parse_list(batch_seq, batch_seq_pair, "--batch-seq") if batch_seq is not None else list(
        DEFAULT_GRID if gpu else CPU_GRID)
    stock_backends = "CUDNN_ATTENTION,EFFICIENT_ATTENTION,FLASH_ATTENTION" if gpu else "MATH,FLASH_ATTENTION"
    backends = parse_list(stock_backends if backend is None else backend, str, "--backend", BACKENDS)
    stock_base = "EFFICIENT_ATTENTION" if "EFFICIENT_ATTENTION" in backends else backends[0]
    base = stock_base if baseline is None else baseline
    if base not in backends:
        raise SpecError(f"--baseline {base!r} is not a measured backend; "
                        f"valid choices: {', '.join(backends)}")
    if preset is None and not (config or model):
        preset = "llama-3.2-1b" if gpu else "tiny"
    common = dict(dtype=dtype, optimizer=optimizer, inputs=inputs, preset=preset, config=config, model=model,
        layers=layers, device=dev.type, warmup=warmup, iters=(100 if gpu else 5) if iters is None else iters)
    compiles = parse_list(compile, str, "--compile", COMPILE_MODES)
    kv_modes = parse_list(kv_heads, str, "--kv-heads", KV_HEADS)
    specs = [LlamaSpec(backend=be, batch=b, seq=n, compile=c, norm=norm, swiglu=swiglu, rope=rope,
                       loss=loss, kv_heads=kv, **common)
             for c in compiles for kv in kv_modes for (b, n) in grid for be in backends]
    if fast:
        specs += [LlamaSpec(backend=backends[0], batch=b, seq=n, **FAST, **common) for (b, n) in grid]
    for s in specs:
        validate(s)
    check_out_dir(out)
    records = run_and_show("llama", specs, measure_llama, LLAMA_COLUMNS, db=db, device=dev,
                           rerun=rerun, quiet=quiet, as_json=as_json, title="trainperf llama")
    table = timing_table(records, base)
    summary = summary_table(table)
    if not (quiet or as_json) and summary.shape[1] > 2:  # more than one setup to set side by side
        console.print(frame_table(summary, title="seconds per iteration; speed-up over the best stock row"))
    for path in write_outputs(table, out, base):
        if not (quiet or as_json):
            err_console.print(f"wrote {path}")


