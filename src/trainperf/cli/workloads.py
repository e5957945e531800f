"""Workload commands: step, attention, kernels, llama."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from trainperf.cli.common import (
    DTYPE_CHOICES,
    DbOpt,
    DeviceOpt,
    Interrupted,
    JsonOpt,
    KvHeadsOpt,
    LossOpt,
    OutOpt,
    QuietOpt,
    RerunOpt,
    RopeOpt,
    SwigluOpt,
    WideOpt,
    app,
    batch_seq_pair,
    check_out_dir,
    check_outputs,
    cli_errors,
    console,
    device_or_fail,
    dtypes,
    err_console,
    frame_table,
    plots_available,
    run_and_show,
    step_parts,
    with_defaults,
)
from trainperf.cli.vocabulary import DTYPE_ALIASES, MODE_ALIASES, RenamedFlags, option
from trainperf.core import report
from trainperf.core.errors import SpecError
from trainperf.core.record import Record
from trainperf.core.shared_sweep import helper_places
from trainperf.core.spec import on_off, parse_list, parse_one, positive_int, sweep
from trainperf.core.store import to_frame

STEP_COLUMNS: list[report.Column] = [
    report.case("model", "model"), report.case("seq", "seq"), report.case("batch", "batch"),
    report.case("dtype", "dtype"), report.case("compile", "compile"),
    report.case("mode", "mode"), report.case("recipe", "recipe"),
    report.Column("swaps", lambda r: r.metrics.get("swaps") or _step_swaps(r.spec), "case"),
    ("step ms", report.timing("step")), ("tok/s", report.metric("tokens_per_s", 4)),
    ("MFU %", report.metric("mfu", 2, 100.0)), ("peak GB", report.metric("peak_mem_gb")),
    report.detail("fwd ms", report.timing("forward")), report.detail("bwd ms", report.timing("backward")),
    report.detail("opt ms", report.timing("optimizer")), report.detail("TFLOP/s", report.metric("tflops")),
    report.detail("MFU at clock %", report.metric("mfu_at_clock", 2, 100.0)),
    *report.GPU_STATE, *report.outcome(),
]


STOCK_PARTS = {"attention": "sdpa", "norm": "torch", "rope": "torch", "swiglu": "torch", "loss": "torch"}


def _step_swaps(spec: dict) -> str:
    """The parts of a step case that are not the stock ones, e.g. 'norm=triton loss=chunked' (of a
    recipe: what it swapped in, its record's `swaps`)."""
    return " ".join(f"{k}={spec[k]}" for k, v in STOCK_PARTS.items() if spec.get(k, v) != v) or "none"


GPT_ONLY = (*STOCK_PARTS, "vocab", "d_model", "d_ff", "layers", "heads")


def refuse_gpt_options(model: str, given: dict[str, Any]) -> None:
    """SpecError naming the GPT LM's own options (swaps, dimensions) given a value of their own for
    a model that is built as it is (models/source.py)."""
    changed = [f"--{k.replace('_', '-')}" for k, v in given.items()
               if k in GPT_ONLY and v not in (None, STOCK_PARTS.get(k))]
    if changed:
        raise SpecError(f"{', '.join(changed)} change the GPT LM presets; --model {model} is built as it is")


def step_spec(axes: dict[str, Any], common: dict[str, Any], gpt: dict[str, Any], blocks: str | None) -> Any:
    """The validated spec of one step case: a GPT LM preset's (its swaps and dimensions), or any
    other model's (models/source.py), which takes none of those."""
    from trainperf.models.presets import PRESETS
    from trainperf.models.source import OTHER_MODELS, is_model_source, refuse_blocks_of_preset
    from trainperf.workloads import model_step, step

    name, recipe = axes.pop("model"), axes.pop("recipe", "stock")
    if name in PRESETS:
        refuse_blocks_of_preset(name, blocks)
        if recipe != "stock":
            raise SpecError(f"--recipe {recipe} acts on a model given as hf:, py: or a config; {name} is a "
                            "preset, which takes trainperf's swaps (--norm, --attention, ...)")
        spec = step.StepSpec.from_preset(name, **axes, **common, **gpt)
        step.validate(spec)
        return spec
    if not is_model_source(name):
        raise SpecError(f"unknown --model {name!r}; valid choices: {', '.join(PRESETS)}; or {OTHER_MODELS}")
    refuse_gpt_options(name, {**axes, **gpt})
    parts = {k: v for k, v in axes.items() if k not in STOCK_PARTS}
    spec = model_step.ModelStepSpec(name, **parts, **common, blocks=blocks, recipe=recipe)
    model_step.validate(spec)
    return spec


@app.command(cls=RenamedFlags)
@cli_errors
def step(
    model: str = option("--model", None, "Comma-separated."),
    seq: str = option("--seq", None, "Comma-separated."),
    batch: str = option("--batch", None, "Comma-separated."),
    dtype: str = option("--dtype", None, "Comma-separated; autocast over fp32 weights (fp16 with a grad "
                                         "scaler)."),
    compile: str = option("--compile", "off", "Here: off, on (comma list ok)."),
    mode: str = option("--mode", "train", "Here: train, forward, forward-backward (comma list ok)."),
    attention: str = option("--attention", "sdpa", "Comma list ok."),
    norm: str = option("--norm", "torch", "Comma list ok."),
    rope: str = option("--rope", "torch", "Comma list ok."),
    swiglu: str = option("--swiglu", "torch", "Comma list ok."),
    loss: str = option("--loss", "torch", "Comma list ok."),
    tf32: str = option("--tf32", "on"),
    warmup: int = option("--warmup", None, "Default 5 on a GPU, 2 on the CPU."),
    iters: int = option("--iters", None, "Default 10 on a GPU, 5 on the CPU."),
    vocab: int = option("--vocab", None, "Default: the preset's own (cs336-8b), else 10000."),
    d_model: int = option("--d-model", None), d_ff: int = option("--d-ff", None),
    layers: int = option("--layers", None), heads: int = option("--heads", None, "Overrides the preset's."),
    peak_tflops: float = option("--peak-tflops", None),
    blocks: str = option("--blocks", None),
    recipe: str = option("--recipe", "stock", "Here, for a model given as hf:, py: or a config: "
                                              "stock, liger (Liger Kernel's patch for its family), "
                                              "float8 (torchao's, on its Linears), trainperf (its chunked "
                                              "loss and, in eager blocks, its Triton RMSNorm, where they "
                                              "compute what the model does); comma list ok."),
    out: Path = OutOpt, device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Time forward, backward and optimizer steps of a model (a GPT LM preset, a transformers config,
    your own nn.Module) across a sweep."""
    from trainperf.models.peers import ANY_MODEL_RECIPES
    from trainperf.workloads.model_step import ModelStepSpec, measure_model_step
    from trainperf.workloads.step import MODES, measure_step

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    defaults = ({"model": "small,medium,large", "seq": "256,512,1024", "batch": "4",
                 "dtype": "bf16", "warmup": 5, "iters": 10} if gpu else
                {"model": "tiny", "seq": "64,128", "batch": "4", "dtype": "fp32",
                 "warmup": 2, "iters": 5})
    opts = with_defaults(defaults, model=model, seq=seq, batch=batch, dtype=dtype,
                         warmup=warmup, iters=iters)
    axes = sweep(
        model=parse_list(opts["model"], str, "--model"),
        seq=parse_list(opts["seq"], positive_int, "--seq"),
        batch=parse_list(opts["batch"], positive_int, "--batch"),
        dtype=dtypes(opts["dtype"]),
        compile=parse_list(compile, on_off, "--compile"),
        mode=parse_list(mode, str, "--mode", MODES),
        recipe=parse_list(recipe, str, "--recipe", ANY_MODEL_RECIPES),
        **{k: parse_list(given, str, f"--{k}", choices) for (k, choices), given in
           zip(step_parts().items(), (attention, norm, rope, swiglu, loss), strict=True)},
    )
    if peak_tflops is not None and not (math.isfinite(peak_tflops) and peak_tflops > 0):
        raise SpecError(f"--peak-tflops must be a positive number, got {peak_tflops}")
    common = {"device": dev.type if dev.index is None else str(dev), "warmup": opts["warmup"],
              "iters": opts["iters"]}
    gpt = {"tf32": parse_one(tf32, on_off, "--tf32"), "vocab": vocab, "d_model": d_model, "d_ff": d_ff,
           "layers": layers, "heads": heads}
    specs = [step_spec(a, common, gpt, blocks) for a in axes]
    check_out_dir(out)

    def measure(spec: Any) -> dict[str, Any]:
        run = measure_model_step if isinstance(spec, ModelStepSpec) else measure_step
        return run(spec, peak_override=peak_tflops)

    records = run_and_show("step", specs, measure, STEP_COLUMNS, db=db, device=dev, rerun=rerun,
                           quiet=quiet, as_json=as_json, title="trainperf step", out=out)
    _step_plot(records, out, quiet or as_json)


def _step_plot(records: list[Record], out: Path, quiet: bool) -> None:
    """Tokens per second against sequence length, a line per (model, dtype, swaps), one panel per
    batch size and mode."""
    df = to_frame(r for r in records if r.status == "ok")
    if "tokens_per_s" not in df or not plots_available(quiet):
        return
    from trainperf.core.plots import line_grid

    df = df.assign(series=[f"{r['model']} {r['dtype']}{' compiled' if r['compile'] else ''} {_step_swaps(r)}"
                           for r in df.to_dict("records")])
    for (mode, batch), group in df.groupby(["mode", "batch"]):
        path = out / f"step_{mode}_batch{batch}.png"
        line_grid(group, "seq", [("tokens_per_s", "tokens per second")], "series", path,
                  title=f"step ({mode}), batch {batch}", logy=False)
        if not quiet:
            err_console.print(f"wrote {path}")


ATTENTION_COLUMNS: list[report.Column] = [
    report.case("attention", "attention"), report.case("mode", "mode"), report.case("b", "batch"),
    report.case("h", "heads"), report.case("seq", "seq"), report.case("d", "head_dim"),
    report.case("dtype", "dtype"), report.case("causal", "causal"), report.case("compiled", "compile"),
    ("time ms", report.timing("time")), ("TFLOP/s", report.metric("tflops")),
    ("peak MB", report.metric("peak_mem_mb", 4)),
    report.detail("kernels ms", report.metric("kernel_ms", 4)),
    report.detail("host ms", report.metric("host_ms", 4)), *report.GPU_STATE, *report.outcome(),
]


@app.command(cls=RenamedFlags)
@cli_errors
def attention(
    attention: str = option("--attention", None, "Comma-separated, or all."),
    head_dim: str = option("--head-dim", None, "Comma-separated."),
    seq: str = option("--seq", None, "Comma-separated."),
    batch: int = option("--batch", None),
    heads: int = option("--heads", 16),
    dtype: str = option("--dtype", None, "Of q, k, v; comma-separated."),
    mode: str = option("--mode", "forward-backward", "Here: forward, backward, forward-backward "
                                                      "(comma list ok)."),
    causal: str = option("--causal", "on", "Comma list ok."),
    compile: str = option("--compile", "off", "Here: off, on (the CS336 leaderboard's protocol: the "
                                              "call compiled, o.sum().backward(), timed by do_bench); "
                                              "comma list ok."),
    warmup: int = option("--warmup", 5),
    iters: int = option("--iters", 20),
    out: Path = OutOpt, device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Time attention implementations (forward, backward) and their peak memory."""
    from trainperf.attention.registry import NAMES
    from trainperf.workloads.attention import MODES, AttentionSpec, measure_attention, validate
    from trainperf.workloads.precision import check_compiler

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    defaults = ({"attention": "all", "head_dim": "64", "seq": "256,1024,4096", "batch": 8, "dtype": "bf16"}
                if gpu else {"attention": "naive,sdpa,sdpa-math,torch-fa2", "head_dim": "32",
                             "seq": "128,256", "batch": 1, "dtype": "fp32"})
    opts = with_defaults(defaults, attention=attention, head_dim=head_dim, seq=seq, batch=batch,
                         dtype=dtype)
    chosen = opts["attention"]
    pinned = [n for n in NAMES if n != "sdpa"]
    axes = sweep(
        attention=pinned if chosen == "all" else parse_list(chosen, str, "--attention", NAMES),
        head_dim=parse_list(opts["head_dim"], positive_int, "--head-dim"),
        seq=parse_list(opts["seq"], positive_int, "--seq"),
        dtype=dtypes(opts["dtype"]),
        mode=parse_list(mode, str, "--mode", MODES, aliases=MODE_ALIASES),
        causal=parse_list(causal, on_off, "--causal"),
        compile=parse_list(compile, on_off, "--compile"),
    )
    if any(a["compile"] for a in axes):
        check_compiler(dev)
    specs = [AttentionSpec(batch=opts["batch"], heads=heads, device=dev.type,
                           warmup=warmup, iters=iters, **a) for a in axes]
    for s in specs:
        validate(s)
    check_out_dir(out)
    records = run_and_show("attention", specs, measure_attention, ATTENTION_COLUMNS, db=db,
                           device=dev, rerun=rerun, quiet=quiet, as_json=as_json,
                           title="trainperf attention", out=out)
    _attention_plots(records, out, quiet or as_json)


def _attention_plots(records: list[Record], out: Path, quiet: bool) -> None:
    """Time and peak memory against sequence length, one figure per (mode, head dim, dtype)."""
    df = to_frame(r for r in records if r.status == "ok")
    if df.empty or not plots_available(quiet):
        return
    from trainperf.core.plots import line_grid

    df["attention"] = df["attention"] + df["compile"].map({True: " compiled", False: ""})

    panels = [("time_ms_median", "median time (ms)")]
    if "peak_mem_mb" in df:
        panels.append(("peak_mem_mb", "peak memory (MB)"))
    for (mode, hd, dt), group in df.groupby(["mode", "head_dim", "dtype"]):
        path = out / f"attention_{mode}_d{hd}_{dt}.png"
        line_grid(group, "seq", panels, "attention", path, title=f"attention {mode}, head dim {hd}, {dt}")
        if not quiet:
            err_console.print(f"wrote {path}")


KERNEL_COLUMNS: list[report.Column] = [
    report.case("kernel", "kernel"), report.case("mode", "mode"), report.case("tokens", "tokens"),
    report.case("d", "d_model"), report.case("dtype", "dtype"), ("time ms", report.timing("time")),
    ("GB/s", report.metric("gbps")), *report.GPU_STATE, *report.outcome(),
]


@app.command(cls=RenamedFlags)
@cli_errors
def kernels(
    kernel: str = option("--kernel", None, "Comma-separated, or all (default on the CPU: the PyTorch ones)."),
    tokens: str = option("--tokens", None, "Comma-separated (default 16384 on a GPU, 256 on the CPU)."),
    d_model: str = option("--d-model", None, "Here the width of each kernel's input, comma-separated "
                                             "(default 2048 on a GPU, 128 on the CPU)."),
    vocab: int = option("--vocab", None, "Here the loss's (default 128256 on a GPU, 512 on the CPU)."),
    dtype: str = option("--dtype", None, "Comma-separated (default bf16 on a GPU, fp32 on the CPU)."),
    mode: str = option("--mode", "forward-backward", "Here: forward, forward-backward (comma list ok)."),
    warmup: int = option("--warmup", 5), iters: int = option("--iters", 20),
    out: Path = OutOpt, device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Time each fused kernel against its PyTorch reference, the compiled reference and the stock op."""
    from trainperf.workloads.kernels import (
        KERNELS,
        MODES,
        KernelSpec,
        measure_kernel,
        parts_and_impls,
        validate,
    )

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    cpu_kernels = "norm-torch,norm-fused,rope-torch,swiglu-torch,loss-torch,loss-chunked"
    defaults = ({"kernel": "all", "tokens": "16384", "d_model": "2048", "vocab": 128_256, "dtype": "bf16"}
                if gpu else {"kernel": cpu_kernels, "tokens": "256", "d_model": "128", "vocab": 512,
                             "dtype": "fp32"})
    opts = with_defaults(defaults, kernel=kernel, tokens=tokens, d_model=d_model, vocab=vocab, dtype=dtype)
    axes = sweep(
        kernel=(list(KERNELS) if opts["kernel"] == "all" else
                parse_list(opts["kernel"], str, "--kernel", KERNELS)),
        tokens=parse_list(opts["tokens"], positive_int, "--tokens"),
        d_model=parse_list(opts["d_model"], positive_int, "--d-model"),
        dtype=dtypes(opts["dtype"]), mode=parse_list(mode, str, "--mode", MODES),
    )
    specs = [KernelSpec(device=dev.type, vocab=opts["vocab"], warmup=warmup, iters=iters, **a) for a in axes]
    for s in specs:
        validate(s)
    check_out_dir(out)
    records = run_and_show("kernels", specs, measure_kernel, KERNEL_COLUMNS, db=db, device=dev, rerun=rerun,
                           quiet=quiet, as_json=as_json, title="trainperf kernels", out=out)
    df = to_frame(r for r in records if r.status == "ok")
    if df.empty or not plots_available(quiet or as_json):
        return
    from trainperf.core.plots import grouped_bars

    part, impl = parts_and_impls(df.kernel)
    df = df.assign(part=part, impl=impl)
    for (mode, dt), group in df.groupby(["mode", "dtype"]):
        path = out / f"kernels_{mode}_{dt}.png"
        grouped_bars(group, "part", "impl", "time_ms_median", path, "median ms per call (lower is better)",
                     title=f"fused kernels and references, {mode}, {dt}")
        if not (quiet or as_json):
            err_console.print(f"wrote {path}")


def _recipe(r: Record) -> str:
    from trainperf.workloads.llama_sdpa import recipe_of

    return recipe_of(r.spec) or "-"


LLAMA_COLUMNS: list[report.Column] = [
    report.Column("recipe", _recipe, "case"), report.case("sdpa backend", "sdpa_backend"),
    report.case("batch", "batch"), report.case("seq", "seq"), report.case("compiled", "compile"),
    report.Column("swaps", report.metric("swaps"), "case"),
    ("s/iter", report.metric("iter_s_median")), ("std", report.metric("iter_s_std", 2)),
    ("tok/s", report.metric("tokens_per_s", 4)), ("TFLOP/s", report.metric("tflops")),
    ("peak GB", report.metric("peak_mem_gb")),
    report.detail("s/iter mean", report.metric("iter_s_mean")),
    report.detail("K/V heads", report.metric("kv_heads")), report.detail("MFU", report.metric("mfu", 3)),
    report.detail("MFU at clock", report.metric("mfu_at_clock", 3)),
    report.detail("fp8 peak share", report.metric("fp8_peak_share", 3)),
    *report.GPU_STATE, report.detail("J/iter", report.metric("iter_energy_j")), *report.outcome(),
]


@app.command(cls=RenamedFlags)
@cli_errors
def llama(
    batch_seq: str = option("--batch-seq", None, "Default: six pairs of 16384 tokens on a GPU."),
    sdpa_backend: str = option("--sdpa-backend", None, "Comma-separated."),
    iters: int = option("--iters", None, "Default 100 on a GPU, 5 on the CPU."),
    warmup: int = option("--warmup", 5),
    optimizer: str = option("--optimizer", "sgd"),
    inputs: str = option("--inputs", "embeds"),
    compile: str = option("--compile", "off", "Comma list ok."),
    dtype: str = option("--dtype", "bf16", "The weights' own (no autocast)."),
    layers: int = option("--layers", None),
    model: str = option("--model", None, "Here a Llama preset, a config.json or model folder, or a hub "
                                         "id (default llama-3.2-1b on a GPU, tiny on the CPU)."),
    baseline: str = option("--baseline", None),
    norm: str = option("--norm", "torch", "Comma list ok."), swiglu: str = SwigluOpt, rope: str = RopeOpt,
    loss: str = LossOpt,
    kv_heads: str = KvHeadsOpt, gemm: str = option("--gemm", "torch"),
    fast: bool = option("--fast", False, "Beside the other rows; with the first backend where "
                                         "FlashAttention 4 does not run."),
    recipe: str = option("--recipe", None, "Comma-separated; instead of --compile, the swaps, --library "
                                           "and --float8."),
    library: str = option("--library", "none"), float8: str = option("--float8", "off"),
    graph: str = option("--graph", "off", "Comma list ok."),
    out: Path = OutOpt, device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Time a random-init Llama training iteration across SDPA backends and batch x seq pairs."""
    from trainperf.models.hf_llama import BACKENDS, NORM_SWAPS
    from trainperf.workloads.llama_sdpa import (
        COMPILE_MODES,
        CPU_GRID,
        DEFAULT_GRID,
        GRAPH_MODES,
        KV_HEADS,
        RECIPES,
        LlamaSpec,
        measure_llama,
        recipe_of,
        recipe_setup,
        setup_spec,
        summary_table,
        timing_table,
        validate,
        with_kv_heads,
        write_outputs,
    )

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    grid = parse_list(batch_seq, batch_seq_pair, "--batch-seq") if batch_seq is not None else list(
        DEFAULT_GRID if gpu else CPU_GRID)
    stock_backends = "CUDNN_ATTENTION,EFFICIENT_ATTENTION,FLASH_ATTENTION" if gpu else "MATH,FLASH_ATTENTION"
    if recipe is not None:  # each recipe on its own attention: the stock ones on the first stock backend
        stock_backends = stock_backends.split(",")[0]
    backends = parse_list(stock_backends if sdpa_backend is None else sdpa_backend, str, "--sdpa-backend",
                          BACKENDS)
    stock_base = "EFFICIENT_ATTENTION" if "EFFICIENT_ATTENTION" in backends else backends[0]
    base = stock_base if baseline is None else baseline
    if base not in backends:
        raise SpecError(f"--baseline {base!r} is not a measured backend; "
                        f"valid choices: {', '.join(backends)}")
    common = dict(dtype=parse_one(dtype, str, "--dtype", DTYPE_CHOICES, DTYPE_ALIASES), optimizer=optimizer,
                  inputs=inputs, model=("llama-3.2-1b" if gpu else "tiny") if model is None else model,
                  layers=layers, device=dev.type, warmup=warmup,
                  iters=(100 if gpu else 5) if iters is None else iters)
    replayed = inputs == "embeds"  # a recipe's CUDA graph is captured from input embeddings only
    if recipe is not None:
        given = {"compile": compile, "norm": norm, "swiglu": swiglu, "rope": rope, "loss": loss, "gemm": gemm,
                 "library": library, "float8": float8, "graph": graph}
        clash = [f"--{field}" for field, value in given.items() if value != getattr(LlamaSpec, field)]
        if clash:
            raise SpecError(f"--recipe sets {', '.join(clash)} itself; give one or the other")
        # a recipe may pick by sequence length: each setup is a function of it
        setups = [functools.partial(recipe_setup, r, dev.type, replayed)
                  for r in parse_list(recipe, str, "--recipe", RECIPES)]
    else:
        parts = {"swiglu": swiglu, "rope": rope, "loss": loss, "gemm": gemm, "library": library,
                 "float8": float8}
        chosen = [{"compile": c, "norm": nm, "graph": g, **parts}
                  for c in parse_list(compile, str, "--compile", COMPILE_MODES)
                  for nm in parse_list(norm, str, "--norm", NORM_SWAPS)
                  for g in parse_list(graph, str, "--graph", GRAPH_MODES)]
        setups = [lambda seq, setup=setup: setup for setup in chosen]  # the same at every length
    kv_modes = parse_list(kv_heads, str, "--kv-heads", KV_HEADS)
    # a recipe that names its attention (fa4) runs once per shape, whatever --sdpa-backend says; every
    # setup runs at one shape before the next, so a sweep stopped early still compares them all
    specs = list(dict.fromkeys(setup_spec(with_kv_heads(setup_at(seq=n), kv), be, batch=b, seq=n, **common)
                               for (b, n) in grid for setup_at in setups for kv in kv_modes
                               for be in backends))
    if fast:
        specs += [setup_spec(recipe_setup("fast", dev.type, replayed, n), backends[0], batch=b, seq=n,
                             **common) for (b, n) in grid]
    check_outputs(out, db)
    for s in specs:
        validate(s)
    try:
        records = run_and_show("llama", specs, measure_llama, LLAMA_COLUMNS, db=db, device=dev,
                               rerun=rerun, quiet=quiet, as_json=as_json, title="trainperf llama", out=out,
                               named={"recipe": lambda r: recipe_of(r.spec)})
    except Interrupted as stopped:  # the finished cases' timing table too, which a suite's headline reads
        write_outputs(timing_table(stopped.records, base), out, base, plots=False,
                      by_recipe=recipe is not None)
        raise
    table = timing_table(records, base)
    summary = summary_table(table, by_recipe=recipe is not None)
    if not (quiet or as_json) and summary.shape[1] > 2:  # more than one setup to set side by side
        console.print(frame_table(summary, title=summary.attrs["title"]))
    for path in write_outputs(table, out, base, plots=plots_available(quiet or as_json),
                              by_recipe=recipe is not None):
        if not (quiet or as_json):
            err_console.print(f"wrote {path}")




PARITY_COLUMNS: list[report.Column] = [
    report.case("recipe", "recipe"), report.case("run", "run"), report.case("draw", "draw"),
    report.case("seed", "seed"), report.case("model", "model"), report.case("layers", "layers"),
    report.case("batch", "batch"), report.case("seq", "seq"), report.case("steps", "train_steps"),
    report.case("lr", "lr"), report.case("optimizer", "optimizer"),
    ("first loss", report.metric("loss_first")), ("last loss", report.metric("loss_last")),
    *report.outcome(),
]


@app.command(cls=RenamedFlags)
@cli_errors
def parity(
    recipe: str = option("--recipe", None, "Comma-separated; stock is always run, as the reference "
                                           "(default: every recipe on a GPU; on the CPU stock and fast, "
                                           "or stock and compile for a model other than a Llama). A "
                                           "Llama takes the llama command's recipes; any other model "
                                           "stock, compile (its blocks compiled) and step's recipes."),
    model: str = option("--model", None, "Default llama-3.2-1b on a GPU, tiny on the CPU."),
    layers: int = option("--layers", None, "Default: the model's full depth."),
    batch: int = option("--batch", None, "Default 8 on a GPU, 4 on the CPU."),
    seq: int = option("--seq", None, "Default 1024 on a GPU, 64 on the CPU."),
    train_steps: int = option("--train-steps", None, "Default 300 on a GPU, 30 on the CPU."),
    stock_seeds: int = option("--stock-seeds", None, "Default 4 on a GPU, 3 on the CPU; at least 2."),
    repeats: int = option("--repeats", 1, "Each run beside stock's run of the same number; a recipe "
                                          "keeps parity only if it does in every run."),
    draws: int = option("--draws", 1, "Draws of the task (another language and its batches each), "
                                      "each recipe's runs of a draw beside stock's of the same draw."),
    lr: float = option("--lr", None, "Of AdamW (default 3e-4 on a GPU, 3e-3 on the CPU); the peak, "
                                     "after warm-up, with adamw-pretrain."),
    optimizer: str = option("--optimizer", "adamw-pretrain", "Here adamw-pretrain or adamw (torch's "
                                                             "defaults)."),
    dtype: str = option("--dtype", "bf16", "A Llama's weights' own; any other model's autocast, over "
                                           "fp32 weights."),
    sdpa_backend: str = option("--sdpa-backend", None, "A Llama's attention, one; default CUDNN_ATTENTION "
                                                       "on a GPU, MATH on the CPU."),
    jobs: int = option("--jobs", 1, "Runs record loss alone, so they may share a machine."),
    out: Path = OutOpt, device: str = DeviceOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Loss curves of training recipes from the same weights and batches, beside stock's."""
    from trainperf.workloads.parity import (
        ParitySpec,
        curves,
        is_llama,
        measure_parity,
        parity_table,
        recipes_of,
        validate,
    )
    from trainperf.workloads.parity_band import MIN_SEEDS, band_table, verdicts_first

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    defaults = ({"model": "llama-3.2-1b", "batch": 8, "seq": 1024, "train_steps": 300, "lr": 3e-4,
                 "sdpa_backend": "CUDNN_ATTENTION", "stock_seeds": 4}
                if gpu else {"model": "tiny", "batch": 4, "seq": 64, "train_steps": 30, "lr": 3e-3,
                             "sdpa_backend": "MATH", "stock_seeds": 3})
    opts = with_defaults(defaults, model=model, layers=layers, batch=batch, seq=seq,
                         train_steps=train_steps, lr=lr, sdpa_backend=sdpa_backend, stock_seeds=stock_seeds)
    opts["optimizer"] = optimizer
    seeds = opts.pop("stock_seeds")
    llama = is_llama(opts["model"])
    if not llama:
        if sdpa_backend is not None:
            raise SpecError(f"--sdpa-backend picks a Llama's attention; {opts['model']} keeps its own")
        opts["sdpa_backend"] = "own"
    choices = recipes_of(opts["model"])
    if recipe is None:
        recipe = ",".join(choices) if gpu else "stock,fast" if llama else "stock,compile"
    recipes = parse_list(recipe, str, "--recipe", choices)
    recipes = ["stock", *[r for r in recipes if r != "stock"]]
    dtype = parse_one(dtype, str, "--dtype", DTYPE_CHOICES, DTYPE_ALIASES)
    for name, value in (("--repeats", repeats), ("--draws", draws)):
        if value < 1:
            raise SpecError(f"{name} must be positive, got {value}")
    if seeds < MIN_SEEDS:
        raise SpecError(f"--stock-seeds must be at least {MIN_SEEDS} (a spread needs two runs), got {seeds}")
    places = helper_places(dev, jobs)
    specs = [ParitySpec(recipe=r, dtype=dtype, device=dev.type, run=(d - 1) * repeats + n, draw=d, **opts)
             for d in range(1, draws + 1) for n in range(1, repeats + 1) for r in recipes]
    specs += [ParitySpec(recipe="stock", dtype=dtype, device=dev.type, run=(d - 1) * repeats + 1, draw=d,
                         seed=seed, **opts) for d in range(1, draws + 1) for seed in range(1, seeds)]
    check_outputs(out, db)
    for s in specs:
        validate(s)
    records = run_and_show("parity", specs, measure_parity, PARITY_COLUMNS, db=db, device=dev, rerun=rerun,
                           quiet=quiet, as_json=as_json, title="trainperf parity", out=out, helpers_at=places)
    losses = curves(records)
    if losses.empty:
        return
    table = parity_table(losses)
    table.to_csv(out / "parity_table.csv", index=False)
    losses.to_csv(out / "parity_losses.csv")
    judged = band_table(records)
    judged.to_csv(out / "parity_band.csv", index=False)
    if not as_json:
        console.print(frame_table(table, title="relative deviation from stock's run of the same weights and "
                                               "batches (smoothed)"))
        if not judged.empty:
            console.print(frame_table(verdicts_first(judged), case=("recipe", "run", "draw"), notes=("why",),
                                      title="loss parity: each run against stock's band (its runs from "
                                            "other weights and batch orders); deviations in units of "
                                            "stock's spread"))
    if plots_available(quiet or as_json):
        from trainperf.workloads.parity import plot_parity
        from trainperf.workloads.parity_band import plot_band

        path = out / "parity_losses.png"
        plot_parity(losses, path)
        drawn = [path] + ([out / "parity_band.png"] if plot_band(records, out / "parity_band.png") else [])
        if not (quiet or as_json):
            for path in drawn:
                err_console.print(f"wrote {path}")
