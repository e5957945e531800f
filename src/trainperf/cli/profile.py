"""Profiling commands: profile step|llama|attention, nsys-decode, profile-compare."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import typer

from trainperf.cli.common import (
    DTYPE_CHOICES,
    DeviceOpt,
    JsonOpt,
    KvHeadsOpt,
    LossOpt,
    NormOpt,
    RopeOpt,
    SwigluOpt,
    WideOpt,
    app,
    batch_seq_pair,
    check_out_dir,
    check_out_file,
    cli_errors,
    console,
    device_or_fail,
    err_console,
    frame_table,
    step_parts,
    with_defaults,
)
from trainperf.cli.vocabulary import DTYPE_ALIASES, MODE_ALIASES, RenamedFlags, option
from trainperf.cli.workloads import refuse_gpt_options
from trainperf.core import env as envmod
from trainperf.core import report
from trainperf.core.errors import SpecError
from trainperf.core.graph_breaks import graph_break_notes
from trainperf.core.spec import on_off, parse_one

profile_app = typer.Typer(help="Per-module kernel breakdown of a workload's step (torch.profiler).")
app.add_typer(profile_app, name="profile")
ProfOut = option("--out", Path("trainperf-out"))
NsysOpt = option("--nsys", False)
RangesOnlyOpt = option("--ranges-only", False)
ProfItersOpt = option("--iters", 1, "Here: the profiled ones.")
TOP_KERNELS = 15  # kernels shown in the terminal; the JSON and the kernels CSV hold them all


def _swap_suffix(swaps: dict[str, str]) -> str:
    """File-name part naming every implementation that is not the stock `torch` one."""
    return "".join(f"_{k}-{v}" for k, v in swaps.items() if v not in ("torch", "off", "native", "none"))


def _profile_and_show(name: str, step, model, dev, iters: int, ranges_only: bool, out: Path,
                      meta: dict[str, Any], as_json: bool, blocks: str | None = None) -> None:
    from trainperf.profiling.session import profile_workload, save_breakdown

    if iters < 1:
        raise SpecError(f"--iters must be positive, got {iters}")
    check_out_dir(out)
    with graph_break_notes() as notes:
        bd = profile_workload(step, model, dev, steps=iters, ranges_only=ranges_only, blocks=blocks)
    for note in notes:  # a compiled step in pieces: the profile shows the pieces, this says why
        err_console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    if bd is None:
        err_console.print(f"ran {iters} step(s) with NVTX ranges")
        return
    meta = {**meta, **({"notes": notes} if notes else {})}
    paths = save_breakdown(bd, out / f"profile_{name}", {**meta, "env": envmod.capture(dev)})
    if as_json:
        sys.stdout.write(paths[0].read_text())
        return
    _show_breakdown(bd, title=f"trainperf profile {name}", cpu=dev.type == "cpu")
    for p in paths:
        err_console.print(f"wrote {p}")


def _show_breakdown(bd, title: str, cpu: bool = False) -> None:
    ranges = bd.ranges.assign(share=bd.ranges["share"] * 100).rename(columns={"share": "share %"})
    console.print(frame_table(ranges, title=title))
    top = bd.kernels.head(TOP_KERNELS).assign(share=lambda d: d["share"] * 100).rename(
        columns={"share": "share %"})
    top["kernel"] = top["kernel"].str.slice(0, 90)
    console.print(frame_table(top, title="top kernels"))
    console.print(f"kernel time {report.fmt(bd.total_kernel_ms)} ms; device idle "
                  f"{report.fmt(bd.idle_fraction * 100)}% of the span from first to last kernel"
                  f"{' (a CPU picture: each op self time stands in for kernels)' if cpu else ''}; "
                  f"{bd.unattributed_kernels} kernels outside any range")


def _nsys_line(argv_tail: str, name: str) -> None:
    console.print(f"nsys profile --trace=cuda,nvtx --export=sqlite -o {name} "
                  f"trainperf profile {argv_tail} --ranges-only\n"
                  f"trainperf nsys-decode {name}.sqlite", highlight=False, soft_wrap=True)


def _argv_without(flag: str) -> str:
    args = sys.argv[sys.argv.index("profile") + 1:] if "profile" in sys.argv else []
    return " ".join(a for a in args if a != flag)


def _step_spec(dev, model: str | None, seq: int | None, batch: int, dtype: str | None, **kw: Any):
    """A validated training-step spec for one profile: medium/512/bf16 on a GPU, tiny on the CPU."""
    from trainperf.models.presets import PRESETS
    from trainperf.workloads.step import StepSpec, validate

    opts = with_defaults({"model": "medium", "seq": 512, "dtype": "bf16"} if dev.type == "cuda" else
                         {"model": "tiny", "seq": 64, "dtype": "fp32"},
                         model=model, seq=seq, dtype=dtype)
    spec = StepSpec.from_preset(parse_one(opts["model"], str, "--model", PRESETS), seq=opts["seq"],
                                batch=batch, dtype=parse_one(opts["dtype"], str, "--dtype", DTYPE_CHOICES,
                                                             DTYPE_ALIASES),
                                mode="train", device=dev.type, d_model=None, d_ff=None, layers=None,
                                heads=None, **kw)
    validate(spec)
    return spec


def _model_case(dev, model: str | None, seq: int | None, batch: int, dtype: str | None, compile: bool,
                blocks: str | None, swaps: dict[str, str]):  # noqa: ANN001
    """The step case and profile name of a model that is not a preset (models/source.py), or None
    for a preset (or none named): the GPT LM step takes those."""
    from trainperf.models.source import is_model_source
    from trainperf.workloads.model_step import ModelStepCase, ModelStepSpec, validate

    if model is None or not is_model_source(model):
        if blocks is not None:
            raise SpecError("--blocks names the blocks of a model given as hf:, py:, a config.json or folder")
        return None
    refuse_gpt_options(model, swaps)
    cpu = dev.type == "cpu"
    spec = ModelStepSpec(model, seq=seq or (64 if cpu else 512), batch=batch,
                         dtype=parse_one(dtype or ("fp32" if cpu else "bf16"), str, "--dtype", DTYPE_CHOICES,
                                         DTYPE_ALIASES),
                         compile=compile, mode="train", device=str(dev), blocks=blocks)
    validate(spec)
    stem = Path(model.split(":")[-2] if model.startswith("py:") else model.removeprefix("hf:")).stem
    return ModelStepCase(spec), f"step_{stem}_seq{spec.seq}_{spec.dtype}"


ModelOpt = option("--model", None, "Here a GPT LM preset or any model (hf:, py:, a config.json or folder); "
                                   "default medium on a GPU, tiny on the CPU.")
BlocksOpt = option("--blocks", None)
SeqOpt = option("--seq", None, "Default 512 on a GPU, 64 on the CPU.")
AutocastOpt = option("--dtype", None, "Autocast over fp32 weights; default bf16 on a GPU, fp32 on the CPU.")


@profile_app.command("step", cls=RenamedFlags)
@cli_errors
def profile_step(
    model: str = ModelOpt, seq: int = SeqOpt, batch: int = option("--batch", 4), dtype: str = AutocastOpt,
    compile: str = option("--compile", "off", "Here: off, on."),
    attention: str = option("--attention", "sdpa"),
    norm: str = NormOpt, rope: str = RopeOpt, swiglu: str = SwigluOpt, loss: str = LossOpt,
    iters: int = ProfItersOpt, out: Path = ProfOut, device: str = DeviceOpt, nsys: bool = NsysOpt,
    ranges_only: bool = RangesOnlyOpt, as_json: bool = JsonOpt, blocks: str = BlocksOpt,
    wide: bool = WideOpt,
) -> None:
    """Breakdown of a model's training step by module range (a GPT LM preset, or any model)."""
    from trainperf.workloads.step import StepCase

    dev = device_or_fail(device)
    given = {"attention": attention, "norm": norm, "rope": rope, "swiglu": swiglu, "loss": loss}
    other = _model_case(dev, model, seq, batch, dtype, parse_one(compile, on_off, "--compile"), blocks, given)
    if other is not None:
        case, name = other
        if nsys:
            return _nsys_line(_argv_without("--nsys"), name)
        return _profile_and_show(name, case.run, case.model, dev, iters, ranges_only, out,
                                 {"spec": case.spec.__dict__, "blocks": case.describe_blocks()}, as_json,
                                 case.blocks_path())
    chosen = {k: parse_one(given[k], str, f"--{k}", choices) for k, choices in step_parts().items()}
    spec = _step_spec(dev, model, seq, batch, dtype, compile=parse_one(compile, on_off, "--compile"),
                      **chosen)
    swaps = _swap_suffix({"rope": rope, "swiglu": swiglu, "loss": loss})
    name = f"step_{spec.model}_seq{spec.seq}_{spec.dtype}_{spec.attention}_{spec.norm}{swaps}"
    if nsys:
        return _nsys_line(_argv_without("--nsys"), name)
    case = StepCase(spec)
    _profile_and_show(name, case.run, case.model, dev, iters, ranges_only, out, {"spec": spec.__dict__},
                      as_json)


def _llama_spec(dev, batch_seq: str | None, sdpa_backend: str | None, model: str | None, dtype: str,
                swaps: dict[str, str], **kw: Any):
    """A validated Llama spec for one profile: llama-3.2-1b 1x4096 cuDNN on a GPU, tiny on the CPU."""
    from trainperf.workloads.llama_sdpa import LlamaSpec, validate

    gpu = dev.type == "cuda"
    b, n = _batch_seq(dev, batch_seq)
    opts = with_defaults({"sdpa_backend": "CUDNN_ATTENTION", "model": "llama-3.2-1b"} if gpu else
                         {"sdpa_backend": "MATH", "model": "tiny"}, sdpa_backend=sdpa_backend, model=model)
    spec = LlamaSpec(batch=b, seq=n, dtype=parse_one(dtype, str, "--dtype", DTYPE_CHOICES, DTYPE_ALIASES),
                     device=dev.type, **opts, **swaps, **kw)
    validate(spec)
    return spec


def _batch_seq(dev, batch_seq: str | None) -> tuple[int, int]:  # noqa: ANN001
    """The profile's one batch x seq pair: 1x4096 on a GPU, 1x64 on the CPU unless given."""
    default = "1x4096" if dev.type == "cuda" else "1x64"
    return parse_one(default if batch_seq is None else batch_seq, batch_seq_pair, "--batch-seq")


LlamaBatchSeqOpt = option("--batch-seq", None, "One pair; default 1x4096 on a GPU, 1x64 on the CPU.")
LlamaBackendOpt = option("--sdpa-backend", None, "One; default CUDNN_ATTENTION on a GPU, MATH on the CPU.")
LlamaModelOpt = option("--model", None, "Here a Llama preset (llama-3.2-1b, llama-3.1-8b, tiny), a "
                                        "config.json or model folder, or a hub id (default llama-3.2-1b "
                                        "on a GPU, tiny on the CPU).")
WeightsDtypeOpt = option("--dtype", "bf16", "The weights' own (no autocast).")


@profile_app.command("llama", cls=RenamedFlags)
@cli_errors
def profile_llama(
    batch_seq: str = LlamaBatchSeqOpt, sdpa_backend: str = LlamaBackendOpt, dtype: str = WeightsDtypeOpt,
    layers: int = option("--layers", None), model: str = LlamaModelOpt,
    norm: str = NormOpt, swiglu: str = SwigluOpt, rope: str = RopeOpt, loss: str = LossOpt,
    kv_heads: str = KvHeadsOpt,
    compile: str = option("--compile", "off"),
    fast: bool = option("--fast", False, "Every setting of `trainperf llama --fast`."),
    recipe: str = option("--recipe", None, "One; every setting of `trainperf llama --recipe NAME` (--fast "
                                           "is --recipe fast)."),
    optimizer: str = option("--optimizer", "sgd", "none profiles forward and backward only."),
    forward_only: bool = option("--forward-only", False),
    iters: int = ProfItersOpt, out: Path = ProfOut, device: str = DeviceOpt, nsys: bool = NsysOpt,
    ranges_only: bool = RangesOnlyOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Breakdown of a Hugging Face Llama training iteration (or its forward pass) by module range."""
    from trainperf.workloads.llama_sdpa import RECIPES, LlamaStep, choose_kv_mode, recipe_setup, with_kv_heads

    dev = device_or_fail(device)
    if fast and recipe not in (None, "fast"):
        raise SpecError(f"--fast is --recipe fast; give one of --fast and --recipe {recipe}")
    if fast or recipe is not None:
        setup = recipe_setup(parse_one("fast" if fast else recipe, str, "--recipe", RECIPES), dev.type,
                             replayed=False, seq=_batch_seq(dev, batch_seq)[1])
        sdpa_backend = setup.pop("sdpa_backend", sdpa_backend)
        swaps = with_kv_heads(setup, kv_heads)
    else:
        swaps = {"norm": norm, "swiglu": swiglu, "rope": rope, "loss": loss, "compile": compile,
                 "kv_heads": kv_heads}
    spec = _llama_spec(dev, batch_seq, sdpa_backend, model, dtype, swaps, layers=layers, optimizer=optimizer)
    name = (f"llama_{spec.sdpa_backend.lower()}_{spec.batch}x{spec.seq}{_swap_suffix(swaps)}"
            f"{'_forward' if forward_only else ''}")
    if nsys:
        return _nsys_line(_argv_without("--nsys"), name)
    step = LlamaStep(spec, dev)
    try:  # closed at the end: a library's patches (Liger) must not outlive this profile
        choose_kv_mode(step, spec.sdpa_backend, spec.kv_heads)
        # a whole-model compile traces every module: range hooks there would be compiled in (and
        # recompile it), so that profile has phase ranges only; per-layer compile keeps the rest
        ranged = None if spec.compile == "on" else step.model
        run = step.forward_pass if forward_only else step
        _profile_and_show(name, run, ranged, dev, iters, ranges_only, out, {"spec": spec.__dict__}, as_json)
    finally:
        step.close()


@app.command("cudnn-study", cls=RenamedFlags)
@cli_errors
def cudnn_study(
    model: str = option("--model", None, "Here a Llama preset, config.json or folder, or hub id (default "
                                         "llama-3.1-8b on a GPU, tiny on the CPU)."),
    batch_seq: str = option("--batch-seq", None, "One pair; default 1x1024 on a GPU, 1x64 on the CPU."),
    layers: int = option("--layers", None), dtype: str = WeightsDtypeOpt,
    phase: str = option("--phase", "forward,step", "Comma list: forward (the study's), step (forward, "
                                                   "backward, SGD)."),
    iters: int = ProfItersOpt, out: Path = ProfOut, device: str = DeviceOpt,
    wide: bool = WideOpt,
) -> None:
    """NVIDIA's PyTorch-vs-cuDNN Llama study here: PyTorch modules vs cuDNN-frontend graphs (RMSNorm,
    attention), profiled by module range and compared."""
    from rich.markup import escape

    from trainperf.core.errors import Unsupported
    from trainperf.core.spec import parse_list
    from trainperf.profiling.cudnn_study import profile_side, side_spec, study_table
    from trainperf.profiling.session import save_breakdown

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    phases = parse_list(phase, str, "--phase", ("forward", "step"))
    if iters < 1:
        raise SpecError(f"--iters must be positive, got {iters}")
    with_gpu_default = with_defaults({"batch_seq": "1x1024", "model": "llama-3.1-8b"} if gpu else {},
                                     batch_seq=batch_seq, model=model)
    base = _llama_spec(dev, with_gpu_default.get("batch_seq"), None, with_gpu_default.get("model"), dtype, {},
                       layers=layers)
    check_out_dir(out)
    meta = {"env": envmod.capture(dev)}
    for ph in phases:
        sides = {}
        for side in ("pytorch", "cudnn"):
            spec = side_spec(base, side)
            if side == "pytorch" and not gpu:
                spec = replace(spec, sdpa_backend="MATH")  # PyTorch's cuDNN SDPA needs a GPU
            err_console.print(f"profiling the {side} side: {spec.model} {spec.batch}x{spec.seq} {ph}, "
                              f"--sdpa-backend {spec.sdpa_backend} --norm {spec.norm}")
            try:
                sides[side] = profile_side(spec, dev, forward_only=ph == "forward", iters=iters)
            except Unsupported as exc:
                err_console.print(f"[yellow]{side} side unsupported:[/yellow] {escape(str(exc))}")
                continue
            save_breakdown(sides[side], out / f"cudnn_study_{ph}_{side}", {**meta, "spec": spec.__dict__})
        if len(sides) < 2:
            continue
        table = study_table(sides["pytorch"], sides["cudnn"], study_rows_only=ph == "forward")
        title = f"{base.model} {base.batch}x{base.seq} {ph}: PyTorch modules vs cuDNN graphs"
        console.print(frame_table(table, title=title))
        csv = out / f"cudnn_study_{ph}.csv"
        study_table(sides["pytorch"], sides["cudnn"], study_rows_only=False).to_csv(csv, index=False)
        err_console.print(f"wrote {csv} and the breakdowns of both sides")


ShardModelOpt = option("--model", None, "Here a GPT LM preset; default cs336-8b with nccl, tiny with gloo.")
ShardWorldOpt = option("--world-size", 2)
ShardModeOpt = option("--shard", "full")
ShardCkptOpt = option("--checkpoint", "none")
ShardSeqOpt = option("--seq", None, "Default 32768 with nccl, 16 with gloo.")
ShardBatchOpt = option("--batch", None, "Here the global batch (default 2 with nccl, 4 with gloo).")
ShardDtypeOpt = option("--dtype", None, "Here bf16 or fp32 (default bf16 with nccl, fp32 with gloo).")
RankOpt = option("--rank", 0)
DistBackendOpt = option("--dist-backend", None)
ShardOptimizerOpt = option("--optimizer", None, "Here adamw or adamw-fused; default adamw-fused with nccl, "
                                                "adamw with gloo.")
ShardCompileOpt = option("--compile", "off", "Here: off, on (each decoder layer).")
ShardAttentionOpt = option("--attention", "sdpa")
ShardFloat8Opt = option("--float8", "off", "Here off, torchao or trainperf (as in trainperf shard).")
ShardReshardOpt = option("--reshard-after-forward", "on")


def _shard_choices(optimizer: str | None, compile: str, attention: str, float8: str,
                   reshard_after_forward: str) -> dict[str, Any]:
    """The sharded step's choices beyond its shape, parsed as `trainperf shard` parses them, so that
    its fastest case can be profiled as it was timed (None: the backend's default)."""
    from trainperf.attention.registry import NAMES
    from trainperf.workloads.sharded import FLOAT8, OPTIMIZERS

    return {"compile": parse_one(compile, on_off, "--compile"),
            "attention": parse_one(attention, str, "--attention", NAMES),
            "float8": parse_one(float8, str, "--float8", FLOAT8),
            "reshard_after_forward": parse_one(reshard_after_forward, on_off, "--reshard-after-forward"),
            "optimizer": None if optimizer is None else parse_one(optimizer, str, "--optimizer", OPTIMIZERS)}


def _sharded_run(kind: str, model: str | None, world_size: int, shard: str, checkpoint: str, seq: int | None,
                 batch: int | None, dtype: str | None, loss: str, rank: int, iters: int,
                 dist_backend: str | None, out: Path, choices: dict[str, Any]) -> str:
    """Launch the ranks of one sharded step, rank `rank` profiled; the files' name."""
    from trainperf.cli.distributed import dist_backend_or_default
    from trainperf.distributed.launch import LaunchError, launch, world_size_problem
    from trainperf.profiling.sharded import profile_rank
    from trainperf.workloads.sharded import DEFAULTS, ShardSpec, validate

    backend = dist_backend_or_default(dist_backend)
    opts = with_defaults(DEFAULTS.get(backend, DEFAULTS["gloo"]), model=model, seq=seq, batch=batch,
                         dtype=dtype, **choices)  # an optimizer not given is the backend's default
    spec = ShardSpec(world_size=world_size, shard=shard, checkpoint=checkpoint, loss=loss,
                     dist_backend=backend, iters=iters, **opts)
    validate(spec)
    if not 0 <= rank < world_size:
        raise SpecError(f"--rank must be between 0 and --world-size - 1 ({world_size - 1}), got {rank}")
    problem = world_size_problem(world_size, backend)
    if problem:
        raise SpecError(problem)
    check_out_dir(out)
    extras = "".join(f"_{part}" for part, on in (
        (spec.attention, spec.attention != "sdpa"), (f"float8-{spec.float8}", spec.float8 != "off"),
        ("compiled", spec.compile), ("gathered", not spec.reshard_after_forward),
        (spec.optimizer, spec.optimizer != "adamw")) if on)
    name = f"shard_{spec.model}_n{world_size}_{shard}_{checkpoint}{extras}_rank{rank}"
    device = torch.device("cuda" if backend == "nccl" else "cpu")
    try:
        meta = {"spec": spec.__dict__, "env": envmod.capture(device)}
        launch(profile_rank, world_size, backend, args=(spec, rank, kind, str(out), name, meta))
    except LaunchError as exc:
        raise SpecError(str(exc)) from None
    return name


@profile_app.command("shard", cls=RenamedFlags)
@cli_errors
def profile_shard(
    model: str = ShardModelOpt, world_size: int = ShardWorldOpt, shard: str = ShardModeOpt,
    checkpoint: str = ShardCkptOpt, seq: int = ShardSeqOpt, batch: int = ShardBatchOpt,
    dtype: str = ShardDtypeOpt, loss: str = LossOpt, optimizer: str = ShardOptimizerOpt,
    compile: str = ShardCompileOpt, attention: str = ShardAttentionOpt, float8: str = ShardFloat8Opt,
    reshard_after_forward: str = ShardReshardOpt, rank: int = RankOpt, iters: int = ProfItersOpt,
    dist_backend: str = DistBackendOpt, out: Path = ProfOut,
    wide: bool = WideOpt,
) -> None:
    """Breakdown of one rank's sharded training step (FSDP2 or DDP) by module range."""
    from trainperf.profiling.session import load_breakdown

    if iters < 1:
        raise SpecError(f"--iters must be positive, got {iters}")
    name = _sharded_run("profile", model, world_size, shard, checkpoint, seq, batch, dtype, loss, rank, iters,
                        dist_backend, out,
                        _shard_choices(optimizer, compile, attention, float8, reshard_after_forward))
    bd, meta = load_breakdown(out / f"profile_{name}.json")
    _show_breakdown(bd, title=f"trainperf profile {name}", cpu=meta["spec"]["dist_backend"] == "gloo")


@profile_app.command("attention", cls=RenamedFlags)
@cli_errors
def profile_attention(
    attention: str = option("--attention", "sdpa"),
    batch: int = option("--batch", 8), heads: int = option("--heads", 16),
    seq: int = option("--seq", None, "Default 4096 on a GPU, 128 on the CPU."),
    head_dim: int = option("--head-dim", 64),
    dtype: str = option("--dtype", None, "Default bf16 on a GPU, fp32 on the CPU."),
    mode: str = option("--mode", "forward-backward", "Here: forward, backward, forward-backward."),
    causal: str = option("--causal", "on"),
    iters: int = ProfItersOpt, out: Path = ProfOut, device: str = DeviceOpt, nsys: bool = NsysOpt,
    ranges_only: bool = RangesOnlyOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Kernel breakdown of one attention call."""
    from trainperf.attention.registry import NAMES
    from trainperf.workloads.attention import AttentionSpec, operation, validate

    dev = device_or_fail(device)
    gpu = dev.type == "cuda"
    opts = with_defaults({"seq": 4096, "dtype": "bf16"} if gpu else {"seq": 128, "dtype": "fp32"},
                         seq=seq, dtype=dtype)
    opts["dtype"] = parse_one(opts["dtype"], str, "--dtype", DTYPE_CHOICES, DTYPE_ALIASES)
    spec = AttentionSpec(attention=parse_one(attention, str, "--attention", NAMES), batch=batch, heads=heads,
                         head_dim=head_dim, mode=parse_one(mode, str, "--mode", aliases=MODE_ALIASES),
                         causal=parse_one(causal, on_off, "--causal"), device=dev.type, **opts)
    validate(spec)
    name = f"attention_{attention}_{spec.mode}_n{spec.seq}_d{head_dim}"
    if nsys:
        return _nsys_line(_argv_without("--nsys"), name)
    op = operation(spec, dev)

    def step(phase):
        with phase(spec.mode):
            return op()

    _profile_and_show(name, step, None, dev, iters, ranges_only, out, {"spec": spec.__dict__}, as_json)


@app.command("nsys-decode", cls=RenamedFlags)
@cli_errors
def nsys_decode(
    trace: Path = typer.Argument(..., help="SQLite export of `nsys profile --trace=cuda,nvtx`."),
    out: Path = option("--out", None, "Also write the breakdown JSON and CSVs there."),
    wide: bool = WideOpt,
) -> None:
    """The per-range kernel table from an Nsight Systems SQLite export."""
    from trainperf.profiling.breakdown import breakdown
    from trainperf.profiling.nsys import NsysFormatError, read_nsys_sqlite
    from trainperf.profiling.session import save_breakdown

    if out:
        check_out_dir(out)
    try:
        bd = breakdown(read_nsys_sqlite(trace))
    except NsysFormatError as exc:
        raise SpecError(str(exc)) from None
    _show_breakdown(bd, title=f"nsys {trace.name}")
    if out:
        for p in save_breakdown(bd, out / f"nsys_{trace.stem}", {"source": str(trace)}):
            err_console.print(f"wrote {p}")


@app.command("profile-compare", cls=RenamedFlags)
@cli_errors
def profile_compare(
    a: Path = typer.Argument(..., help="Breakdown JSON written by `trainperf profile` (A)."),
    b: Path = typer.Argument(..., help="Breakdown JSON (B); speed-up is A time / B time."),
    table_file: Path = option("--file", None, "Also, as CSV."),
    wide: bool = WideOpt,
) -> None:
    """Two per-range breakdowns side by side with kernel counts, times and speed-up."""
    from trainperf.profiling.session import compare_breakdowns, load_breakdown

    if table_file:
        check_out_file(table_file, "--file")
    try:
        (bda, meta_a), (bdb, meta_b) = load_breakdown(a), load_breakdown(b)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    table = compare_breakdowns(bda, bdb)
    console.print(frame_table(table, title=f"A = {a.name}   B = {b.name}"))
    ta, tb = bda.total_kernel_ms, bdb.total_kernel_ms
    console.print(f"total kernel time: A {report.fmt(ta)} ms, B {report.fmt(tb)} ms "
                  f"(speed-up {report.fmt(ta / tb if tb else None)})")
    ga, gb = meta_a.get("env", {}).get("gpu_name"), meta_b.get("env", {}).get("gpu_name")
    if ga != gb:
        err_console.print(f"[yellow]note:[/yellow] A ran on {ga or 'cpu'}, B on {gb or 'cpu'}")
    if table_file:
        table.to_csv(table_file, index=False)




memory_app = typer.Typer(help="Where a step's memory goes: per-phase peaks, allocations, timeline.")
app.add_typer(memory_app, name="memory")


@memory_app.command("step", cls=RenamedFlags)
@cli_errors
def memory_step(
    model: str = ModelOpt, seq: int = SeqOpt, batch: int = option("--batch", 4), dtype: str = AutocastOpt,
    phase: str = option("--phase", "step"),
    out: Path = ProfOut, device: str = DeviceOpt, blocks: str = BlocksOpt,
    wide: bool = WideOpt,
) -> None:
    """Memory profile of a model's step (a GPT LM preset, or any model): snapshot (GPU), peaks per
    phase, timeline PNG."""
    from trainperf.profiling.memory import memory_profile
    from trainperf.workloads.model_step import ModelStepCase
    from trainperf.workloads.step import StepCase

    if phase not in ("forward", "step"):
        raise SpecError(f"--phase {phase!r}; valid choices: forward, step")
    dev = device_or_fail(device)
    other = _model_case(dev, model, seq, batch, dtype, False, blocks, {})
    if other is not None:
        check_out_dir(out)
        case, stem = other
        name = f"{stem}_{phase}"
    else:
        spec = _step_spec(dev, model, seq, batch, dtype, compile=False)
        check_out_dir(out)
        case = StepCase(spec)
        name = f"step_{spec.model}_seq{spec.seq}_{spec.dtype}_{phase}"
    until = "forward" if phase == "forward" else None
    blocks = case.blocks_path() if isinstance(case, ModelStepCase) else None
    _show_report(memory_profile(case.run, case.model, dev, out, name, until=until, blocks=blocks), name)



@memory_app.command("llama", cls=RenamedFlags)
@cli_errors
def memory_llama(
    batch_seq: str = LlamaBatchSeqOpt, sdpa_backend: str = LlamaBackendOpt, dtype: str = WeightsDtypeOpt,
    layers: int = option("--layers", None), model: str = LlamaModelOpt,
    norm: str = NormOpt, swiglu: str = SwigluOpt, rope: str = RopeOpt, loss: str = LossOpt,
    optimizer: str = option("--optimizer", "sgd"), out: Path = ProfOut, device: str = DeviceOpt,
    wide: bool = WideOpt,
) -> None:
    """Memory profile of a Hugging Face Llama training iteration: peaks per phase, allocations."""
    from trainperf.profiling.memory import memory_profile
    from trainperf.workloads.llama_sdpa import LlamaStep, choose_kv_mode

    dev = device_or_fail(device)
    spec = _llama_spec(dev, batch_seq, sdpa_backend, model, dtype,
                       {"norm": norm, "swiglu": swiglu, "rope": rope, "loss": loss}, layers=layers,
                       optimizer=optimizer)
    check_out_dir(out)
    step = LlamaStep(spec, dev)
    choose_kv_mode(step, spec.sdpa_backend, spec.kv_heads)
    name = f"llama_{spec.model}_{spec.batch}x{spec.seq}_{spec.dtype}"
    _show_report(memory_profile(step, step.model, dev, out, name), name)


@memory_app.command("shard", cls=RenamedFlags)
@cli_errors
def memory_shard(
    model: str = ShardModelOpt, world_size: int = ShardWorldOpt, shard: str = ShardModeOpt,
    checkpoint: str = ShardCkptOpt, seq: int = ShardSeqOpt, batch: int = ShardBatchOpt,
    dtype: str = ShardDtypeOpt, loss: str = LossOpt, optimizer: str = ShardOptimizerOpt,
    compile: str = ShardCompileOpt, attention: str = ShardAttentionOpt, float8: str = ShardFloat8Opt,
    reshard_after_forward: str = ShardReshardOpt, rank: int = RankOpt,
    dist_backend: str = DistBackendOpt, out: Path = ProfOut,
    wide: bool = WideOpt,
) -> None:
    """Memory profile of one rank's sharded training step: peaks per phase, allocations, timeline."""
    import pandas as pd

    name = _sharded_run("memory", model, world_size, shard, checkpoint, seq, batch, dtype, loss, rank, 1,
                        dist_backend, out,
                        _shard_choices(optimizer, compile, attention, float8, reshard_after_forward))
    _show_memory(name, pd.read_csv(out / f"memory_{name}_phases.csv"),
                 pd.read_csv(out / f"memory_{name}_largest.csv"), files=[out / f"memory_{name}_timeline.png"])


def _show_report(rep, name: str) -> None:  # noqa: ANN001
    _show_memory(name, rep.phases, rep.largest, rep.notes, rep.files)


def _show_memory(name: str, phases: Any, largest: Any, notes: Any = (), files: Any = ()) -> None:
    """The memory tables of a profile (frames), its notes and the files it wrote."""
    console.print(frame_table(phases, title=f"memory per phase: {name}"))
    console.print(frame_table(largest, title="largest allocations (innermost module range)"))
    for note in notes:
        console.print(f"[dim]{note}[/dim]")
    for p in files:
        err_console.print(f"wrote {p}")
