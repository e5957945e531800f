"""Multi-process commands: comm (collectives), ddp (data-parallel training step variants) and shard
(the training step of a model sharded across ranks)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import typer

from trainperf.cli.common import (
    DTYPE_CHOICES,
    DbOpt,
    Interrupted,
    JsonOpt,
    OutOpt,
    QuietOpt,
    RerunOpt,
    WideOpt,
    app,
    check_out_dir,
    cli_errors,
    console,
    err_console,
    frame_table,
    plots_available,
    show_records,
    table_kept_on_interrupt,
    with_defaults,
    write_records_csv,
)
from trainperf.cli.vocabulary import DTYPE_ALIASES, RenamedFlags, option
from trainperf.core import env as envmod
from trainperf.core import report
from trainperf.core.errors import SpecError
from trainperf.core.progress import SweepProgress
from trainperf.core.record import Record, case_key_for, spec_dict
from trainperf.core.spec import on_off, parse_list, parse_one, positive_int, sweep
from trainperf.core.store import Store, to_frame
from trainperf.distributed.heartbeat import FAULT_ENV, parse_fault
from trainperf.distributed.launch import (
    LaunchError,
    existing_launch,
    launch,
    launch_run_id,
    log_to,
    rank_device,
    world_size_problem,
)
from trainperf.distributed.links import LINKS
from trainperf.distributed.ranked_sweep import Done, run_ranked_cases
from trainperf.distributed.supervisor import DEFAULT_TIMEOUT_S, Supervisor
from trainperf.workloads.comm import binary_size

if TYPE_CHECKING:
    import pandas as pd

# workload -> (module under trainperf.workloads, its function that measures a case on one rank)
MEASURES = {"comm": ("comm", "measure_comm"), "ddp": ("ddp", "measure_ddp"),
            "shard": ("sharded", "measure_sharded")}


def rank_zero() -> bool:
    """Whether this process stores and shows: it started the ranks, or it is global rank 0."""
    launched = existing_launch()
    return launched is None or launched[0] == 0


def _measure_of(workload: str) -> Any:
    import importlib

    module, name = MEASURES[workload]
    return getattr(importlib.import_module(f"trainperf.workloads.{module}"), name)


RESTARTED = ("the launch restarted while this case ran: a rank failed or stopped responding (the "
             "launcher's log names it)")


def _rank_worker(rank: int, world: int, workload: str, cases: list, db: str, env: dict,
                 backend: str, on_done: Done | None = None) -> None:
    """Entry point of every rank of a torchrun or Slurm launch: the cases rank 0 chooses (each node
    may keep a store of its own), in lockstep, outcomes exchanged after each, each stored one
    handed to `on_done` on rank 0. A group the launcher restarted (`--max-restarts`) first
    stores the case it was in as that case's row, then goes on with the next: none measured twice."""
    import tempfile

    import torch.distributed as dist

    from trainperf.distributed.heartbeat import Heartbeat, install

    run = launch_run_id()
    chosen = [[i for i, _ in cases]]
    if rank == 0 and run:
        chosen = [_after_restart(workload, cases, Store(db), env, run, world)]
    dist.broadcast_object_list(chosen, src=0)
    cases = [(i, s) for i, s in cases if i in set(chosen[0])]
    device = rank_device(backend, rank)
    beat = Heartbeat(Path(tempfile.mkdtemp(prefix="trainperf-beat-")) / f"rank{rank}.json", rank, device)
    install(beat)  # where TRAINPERF_FAULT strikes, and a case's index for it
    run_ranked_cases(rank, world, workload, cases, _measure_of(workload), device, db, env, beat,
                     launch_run=run, on_done=on_done)


def _after_restart(workload: str, cases: list, store: Store, env: dict, run: str, world: int) -> list[int]:
    """The indexes of `cases` launch `run` has not stored yet, once the case a restarted group was
    in (its claim left behind) is stored as an error row."""
    from trainperf.distributed.launch import placement

    keys = {i: case_key_for(workload, s, env) for i, s in cases}
    done = {r.key for r in store.records(run_id=run)}
    for key in store.claims_of(run):
        spec = next((s for i, s in cases if keys[i] == key), None)
        if spec is not None and key not in done:
            store.append(Record(workload, spec_dict(spec), "error", placement(world), RESTARTED, env,
                                run_id=run))
            done.add(key)
        store.release(key, run)
    return [i for i, _ in cases if keys[i] not in done]


def _run_distributed(workload: str, specs: list, backend: str, db: Path, out: Path, rerun: bool,
                     quiet: bool, timeout_s: float, precheck: Any = None) -> list[Record]:
    """Group cases by world size, run each group under the supervisor (a failed case is a record and
    the rest run in a fresh process group), return the stored records in order (on Ctrl-C, the
    finished ones' table first)."""
    device = torch.device("cuda" if backend == "nccl" else "cpu")
    env = envmod.capture(device)
    if not rank_zero():  # a rank of a launch: rank 0 chooses the cases and stores them (_rank_worker)
        _supervise(workload, list(enumerate(specs)), backend, db, env, out, quiet, timeout_s)
        return []
    store = Store(db)
    keys = [case_key_for(workload, s, env) for s in specs]
    with table_kept_on_interrupt(workload, keys, store, out):
        todo = [(i, s) for i, (s, k) in enumerate(zip(specs, keys, strict=True))
                if rerun or store.settled_case(k) is None]
        if precheck is not None:  # a case that cannot fit is an oom record without running
            for i, s in list(todo):
                why = precheck(s, device)
                if why:
                    store.append(Record(workload, spec_dict(s), "oom", reason=why, env=env))
                    todo.remove((i, s))
        failed = _supervise(workload, todo, backend, db, env, out, quiet, timeout_s)
        # an error record is not a finished case; this launch's own (a restarted group's) is its row
        run = launch_run_id()
        mine = {r.key: r for r in store.records(run_id=run)} if run and existing_launch() else {}
        found = (failed.get(k) or mine.get(k) or store.find_case(k) for k in keys)
        return [r for r in found if r is not None]


def _supervise(workload: str, todo: list, backend: str, db: Path, env: dict[str, Any], out: Path, quiet: bool,
               timeout_s: float) -> dict[str, Record]:
    """Run the cases of `todo` (index, spec) one process group per world size and link, under the
    supervisor here or in the launch that started this process; the failed cases' records by key."""
    with SweepProgress(workload, len(todo), err_console, quiet) as progress:
        failed: dict[str, Record] = {}
        for world, link in sorted({(s.world_size, getattr(s, "link", "auto")) for _, s in todo}):
            cases = [(i, s) for i, s in todo if s.world_size == world and getattr(s, "link", "auto") == link]
            if existing_launch() is not None:
                label = {i: s.label() for i, s in cases}
                try:
                    launch(_rank_worker, world, backend, timeout_s=timeout_s,
                           args=(workload, cases, str(db), env, backend, lambda index, record, label=label:
                                 progress.finished(label[index], record.status)))
                except LaunchError as exc:
                    raise SpecError(str(exc)) from None
                continue
            start = progress.completed
            supervisor = Supervisor(workload, _measure_of(workload), world, backend, db, env, out / "logs",
                                    timeout_s=timeout_s, say=lambda line: progress.console.print(
                                        line, markup=False, highlight=False, soft_wrap=True),
                                    on_progress=lambda done, spec, status, start=start: progress.finished(
                                        spec.label(), status, start + done), environ=LINKS[link])
            failed.update({r.key: r for r in supervisor.run(cases)})
    return failed


def _validate_run_show(workload: str, specs: list, validate: Any, columns: list[report.Column],
                       backend: str, out: Path, db: Path, rerun: bool, quiet: bool,
                       as_json: bool, timeout_s: float, precheck: Any = None) -> list[Record]:
    """Refuse a bad case before any work, run the cases on their ranks, show and write the records.
    Under torchrun or Slurm, global rank 0 alone speaks and writes; every other rank's output goes
    to `<out>/logs/<command>-rankR.log`, and it ends once its cases are done."""
    launched = existing_launch()
    if launched is not None and launched[0] != 0:
        log_to(out / "logs" / f"{workload}-rank{launched[0]}.log")
    if launched is None:  # this host starts the ranks: can it?
        for world in sorted({s.world_size for s in specs}):
            problem = world_size_problem(world, backend)
            if problem:
                raise SpecError(problem)
    for s in specs:
        validate(s)
    if fault := os.environ.get(FAULT_ENV):
        try:
            parse_fault(fault)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    if not 0 < timeout_s < math.inf:
        raise SpecError(f"--timeout must be a positive number of seconds, got {timeout_s:g}")
    check_out_dir(out)
    records = _run_distributed(workload, specs, backend, db, out, rerun, quiet or as_json, timeout_s,
                               precheck)
    if launched is not None and launched[0] != 0:
        raise typer.Exit(0)
    show_records(records, columns, f"trainperf {workload}", as_json)
    write_records_csv(records, out, workload)
    return records


TimeoutOpt = option("--timeout", DEFAULT_TIMEOUT_S)


COMM_COLUMNS: list[report.Column] = [
    report.case("op", "op"), report.Column("size", lambda r: binary_size(r.spec["bytes"]), "case"),
    report.case("n", "world_size"), report.case("scope", "scope"), report.case("backend", "dist_backend"),
    report.case("link", "link"),
    report.case("dtype", "dtype"), report.case("timing", "timing"), report.case("in place", "in_place"),
    ("time us", report.metric("time_us")), ("algbw GB/s", report.metric("algbw_gbps")),
    ("busbw GB/s", report.metric("busbw_gbps")),
    report.detail("rank spread", report.metric("rank_spread", 2)),
    *report.outcome(),
]


def dist_backend_or_default(given: str | None) -> str:
    """--dist-backend as given (validated with the spec), or nccl where GPUs are, else gloo."""
    return ("nccl" if torch.cuda.is_available() else "gloo") if given is None else given


@app.command(cls=RenamedFlags)
@cli_errors
def comm(
    op: str = option("--op", "all_reduce,all_gather,reduce_scatter,broadcast", "Comma-separated."),
    nbytes: str = option("--bytes", None, "Comma-separated (default 1M:1G with nccl, 64K,1M,8M with "
                                          "gloo)."),
    timing: str = option("--timing", "loop", "Comma list ok."),
    in_place: str = option("--in-place", "on", "Comma list ok."),
    link: str = option("--link", "auto", "Comma list ok."),
    scope: str = option("--scope", "all", "Comma list ok."),
    world_size: str = option("--world-size", "2", "Comma-separated."),
    dist_backend: str = option("--dist-backend", None),
    dtype: str = option("--dtype", "fp32", "Of the message."),
    warmup: int = option("--warmup", 5), iters: int = option("--iters", 20),
    timeout: float = TimeoutOpt, out: Path = OutOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Time collectives through torch.distributed; algbw/busbw as nccl-tests define them."""
    from trainperf.workloads.comm import OPS, SCOPES, TIMINGS, CommSpec, parse_sizes, validate

    backend = dist_backend_or_default(dist_backend)
    text = nbytes if nbytes is not None else ("1M:1G" if backend == "nccl" else "64K,1M,8M")
    sizes = []
    for item in parse_list(text, str, "--bytes"):  # empty and repeated items are refused here
        try:
            sizes += parse_sizes(item)
        except ValueError:
            raise SpecError(f"--bytes: cannot read {item!r}") from None
    axes = sweep(world_size=parse_list(world_size, positive_int, "--world-size"),
                 op=parse_list(op, str, "--op", OPS), bytes=sizes,
                 timing=parse_list(timing, str, "--timing", TIMINGS),
                 in_place=parse_list(in_place, on_off, "--in-place"),
                 link=parse_list(link, str, "--link", LINKS), scope=parse_list(scope, str, "--scope", SCOPES))
    dtype = parse_one(dtype, str, "--dtype", DTYPE_CHOICES, DTYPE_ALIASES)
    specs = [CommSpec(dist_backend=backend, dtype=dtype, warmup=warmup, iters=iters, **a) for a in axes]
    records = _validate_run_show("comm", specs, validate, COMM_COLUMNS, backend, out, db, rerun, quiet,
                                 as_json, timeout)
    ok = to_frame(r for r in records if r.status == "ok")
    if not ok.empty and plots_available(quiet or as_json):
        from trainperf.core.plots import line_grid

        series = (ok.op + " n=" + ok.world_size.astype(str) + " " + ok.timing
                  + ok.in_place.map({True: "", False: " out-of-place"}))
        ok = ok.assign(**{"message MiB": ok.bytes / 2**20}, series=series)
        path = out / f"comm_busbw_{backend}.png"
        line_grid(ok, "message MiB", [("busbw_gbps", "bus bandwidth (GB/s)")], "series", path,
                  title=f"collectives, {backend}", logx=True, logy=False)
        if not (quiet or as_json):
            err_console.print(f"wrote {path}")


DDP_COLUMNS: list[report.Column] = [
    report.case("variant", "variant"), report.case("model", "model"), report.case("n", "world_size"),
    report.case("link", "link"), report.case("compiled", "compile"), report.case("round", "round"),
    report.case("bucket MB", "bucket_mb"), report.case("shard opt", "shard_optimizer"),
    report.case("grads", "reduce_dtype"), ("step ms", report.timing("step")),
    ("tok/s", report.metric("tokens_per_s", 4)), ("exposed comm ms", report.metric("exposed_comm_ms")),
    ("hidden", report.metric("hidden_share", 2)), ("peak GB", report.metric("peak_mem_gb")),
    report.detail("compute ms", report.metric("compute_ms")),
    report.detail("NCCL ms", report.metric("nccl_ms")),
    report.detail("least exposed ms", report.metric("exposed_comm_least_ms")),
    report.detail("host-late ms", report.metric("exposed_comm_host_ms")),
    report.detail("comm alone ms", report.metric("comm_alone_ms")),
    report.detail("opt state MB", report.metric("opt_state_mb")), *report.outcome(),
]


@app.command(cls=RenamedFlags)
@cli_errors
def ddp(
    model: str = option("--model", None, "Here a GPT LM preset or any other model; default small with "
                                         "nccl, tiny with gloo."),
    blocks: str = option("--blocks", None),
    world_size: str = option("--world-size", "2", "Comma-separated."),
    variant: str = option("--variant", "naive,flat,overlap,bucketed,ddp,fsdp2", "Comma-separated."),
    bucket_mb: str = option("--bucket-mb", "25", "Comma-separated."),
    shard_optimizer: str = option("--shard-optimizer", "off", "Comma list ok."),
    link: str = option("--link", "auto", "Comma list ok."),
    compile: str = option("--compile", "off", "Here: off, on (each decoder layer); comma list ok."),
    reduce_dtype: str = option("--reduce-dtype", "fp32", "Comma list ok."),
    rounds: int = option("--rounds", None, "Default 3 with nccl, 1 with gloo."),
    seq: int = option("--seq", None, "Default 512 with nccl, 32 with gloo."),
    batch: int = option("--batch", None, "Default 4 with nccl, 2 with gloo."),
    dtype: str = option("--dtype", None, "Here fp32 or bf16, autocast over fp32 weights (default bf16 "
                                         "with nccl)."),
    optimizer: str = option("--optimizer", None, "Here adamw, adamw-fused or sgd; default adamw-fused with "
                                                 "nccl (its foreach form costs the host several times as "
                                                 "much), adamw with gloo."),
    dist_backend: str = option("--dist-backend", None),
    warmup: int = option("--warmup", 3), iters: int = option("--iters", 10),
    timeout: float = TimeoutOpt, out: Path = OutOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Time a data-parallel training step per gradient-sync variant (and PyTorch DDP / FSDP2)."""
    from trainperf.workloads.ddp import VARIANTS, DDPSpec, validate

    backend = dist_backend_or_default(dist_backend)
    gpu = backend == "nccl"
    variants = parse_list(variant, str, "--variant", VARIANTS)
    buckets = parse_list(bucket_mb, float, "--bucket-mb")
    defaults = ({"model": "small", "seq": 512, "batch": 4, "dtype": "bf16", "rounds": 3,
                 "optimizer": "adamw-fused"} if gpu else
                {"model": "tiny", "seq": 32, "batch": 2, "dtype": "fp32", "rounds": 1, "optimizer": "adamw"})
    opts = with_defaults(defaults, model=model, seq=seq, batch=batch, dtype=dtype, rounds=rounds,
                         optimizer=optimizer)
    rounds = opts.pop("rounds")
    if rounds < 1:
        raise SpecError(f"--rounds must be positive, got {rounds}")
    opts["dtype"] = parse_one(opts["dtype"], str, "--dtype", DTYPE_CHOICES, DTYPE_ALIASES)
    preset_or_model(opts["model"])
    common: dict[str, Any] = dict(**opts, dist_backend=backend, warmup=warmup, iters=iters, blocks=blocks)
    specs = []
    axes = sweep(world_size=parse_list(world_size, positive_int, "--world-size"),
                 link=parse_list(link, str, "--link", LINKS),
                 compile=parse_list(compile, on_off, "--compile"),
                 reduce_dtype=parse_list(reduce_dtype, str, "--reduce-dtype", ("fp32", "bf16")),
                 round=list(range(1, rounds + 1)),
                 variant=variants,
                 shard_optimizer=parse_list(shard_optimizer, on_off, "--shard-optimizer"))
    for a in axes:  # round after round, every variant once a round
        if a["variant"] == "fsdp2" and a["shard_optimizer"] and len(variants) > 1:
            if a["round"] == 1:
                err_console.print("note: no fsdp2 case with --shard-optimizer on (FSDP2 shards optimizer "
                                  "state itself)")
            continue
        for b in (buckets if a["variant"] in ("bucketed", "ddp") else [None]):
            specs.append(DDPSpec(bucket_mb=b, **a, **common))
    try:
        records = _validate_run_show("ddp", specs, validate, DDP_COLUMNS, backend, out, db, rerun, quiet,
                                     as_json, timeout)
    except Interrupted as stopped:  # the finished rounds' table beside the finished cases'
        _write_rounds(stopped.records, out, quiet or as_json)
        raise
    table = _write_rounds(records, out, quiet or as_json)
    if rounds > 1 and not as_json and not table.empty:
        title = ("ddp in alternating rounds: step (ms) with its 95% interval; a lead over naive only "
                 "where its interval clears 1")
        console.print(frame_table(table, title=title))


def preset_or_model(name: str) -> str:
    """`name` where it names a GPT LM preset or any other model (models/source.py), else SpecError."""
    from trainperf.models.presets import PRESETS
    from trainperf.models.source import OTHER_MODELS, is_model_source

    if name not in PRESETS and not is_model_source(name):
        raise SpecError(f"--model: unknown value {name!r}; valid choices: {', '.join(PRESETS)}; "
                        f"or {OTHER_MODELS}")
    return name


def _write_rounds(records: list[Record], out: Path, quiet: bool) -> pd.DataFrame:
    """The rounds table of ddp records as `<out>/ddp_rounds.csv`, and its plot; the table."""
    from trainperf.workloads.ddp_rounds import rounds_table

    table = rounds_table(records)
    if not table.empty:
        table.to_csv(out / "ddp_rounds.csv", index=False)
        if plots_available(quiet):
            from trainperf.core.plots import grouped_bars

            named = table.assign(setup=table.variant + table.shard_optimizer.map({True: " zero1", False: ""})
                                 + table.link.map(lambda link: "" if link == "auto" else f" over {link}")
                                 + table.compile.map({True: " compiled", False: ""})
                                 + table.reduce_dtype.map(lambda d: "" if d == "fp32" else f" {d} grads"),
                                 world=table.model + " n=" + table.world_size.astype(str))
            grouped_bars(named, "setup", "world", "step_ms_median", out / "ddp_steps.png",
                         "ms per step (median over rounds, 95% interval)", "data-parallel step per variant",
                         errors="step_ms_ci95")
    return table


SHARD_COLUMNS: list[report.Column] = [
    report.case("model", "model"), report.case("n", "world_size"), report.case("shard", "shard"),
    report.case("ckpt", "checkpoint"), report.case("reshard", "reshard_after_forward"),
    report.case("prefetch", "prefetch"), report.case("unit", "unit_layers"),
    report.Column("batch x seq", lambda r: f"{r.spec['batch']}x{r.spec['seq']}", "case"),
    report.case("dtype", "dtype"), report.case("grads", "reduce_dtype"),
    report.case("optimizer", "optimizer"), report.case("loss", "loss"),
    report.case("compiled", "compile"), report.case("graphed", "cuda_graph"), report.case("float8", "float8"),
    report.case("expandable", "expandable_segments"),
    ("step ms", report.timing("step")), ("MFU", report.metric("mfu", 3)),
    ("exposed comm ms", report.metric("exposed_comm_ms")), ("peak GB", report.metric("peak_mem_gb")),
    ("tok/s", report.metric("tokens_per_s")),
    report.detail("fwd ms", report.metric("forward_ms")),
    report.detail("bwd ms", report.metric("backward_ms")),
    report.detail("opt ms", report.metric("optimizer_ms")),
    report.detail("least exposed ms", report.metric("exposed_comm_least_ms")),
    report.detail("host-late ms", report.metric("exposed_comm_host_ms")),
    report.detail("recompute TFLOP", report.metric("recompute_tflop", 3)),
    report.detail("MFU at clock", report.metric("mfu_at_clock", 3)),
    report.detail("HFU", report.metric("hfu", 3)),
    report.detail("fp8 peak share", report.metric("fp8_peak_share", 3)), *report.outcome(),
]


def draw_scaling(ok: pd.DataFrame, path: Path) -> Path:
    """Tokens/s per GPU and scaling efficiency against world size, one line per choice."""
    from trainperf.core.plots import line_grid
    from trainperf.workloads.sharded import scaling_table

    line_grid(scaling_table(ok), "GPUs", [("tokens/s per GPU", "tokens/s per GPU"),
                                          ("efficiency", "over the model's best on one GPU")],
              "choice", path, title="scaling: tokens/s per GPU against world size", logx=False, logy=False)
    return path


@app.command(cls=RenamedFlags)
@cli_errors
def shard(
    model: str = option("--model", None, "Here GPT LM presets, comma-separated (cs336-8b: the CS336 "
                                         "leaderboard's 8B model), or any other model; default cs336-8b "
                                         "with nccl, tiny with gloo."),
    blocks: str = option("--blocks", None),
    peak_tflops: float = option("--peak-tflops", None, "Per GPU (or CPU process)."),
    world_size: str = option("--world-size", "2", "Comma-separated."),
    shard_mode: str = option("--shard", "full", "Comma list ok."),
    checkpoint: str = option("--checkpoint", "none", "Comma list ok."),
    seq: int = option("--seq", None, "Default 32768 with nccl, 16 with gloo."),
    batch: int = option("--batch", None, "Here the global batch, split over the ranks (default 2 with "
                                         "nccl, 4 with gloo)."),
    batch_per_rank: int = option("--batch-per-rank", None, "Instead of --batch."),
    dtype: str = option("--dtype", None, "Here bf16 (FSDP2 mixed precision) or fp32; default bf16 with "
                                         "nccl, fp32 with gloo. Comma list ok."),
    optimizer: str = option("--optimizer", None, "Here adamw or adamw-fused; default adamw-fused with nccl, "
                                                 "adamw with gloo. Comma list ok."),
    offload: str = option("--offload", "off", "Comma list ok."),
    reshard_after_forward: str = option("--reshard-after-forward", "on", "Comma list ok."),
    prefetch: str = option("--prefetch", "0", "Comma list ok."),
    unit_layers: str = option("--unit-layers", "1", "Comma list ok."),
    reduce_dtype: str = option("--reduce-dtype", "fp32", "Comma list ok."),
    compile: str = option("--compile", "off", "Here: off, on (each decoder layer); comma list ok."),
    cuda_graph: str = option("--cuda-graph", "off", "Comma list ok."),
    expandable_segments: str = option("--expandable-segments", "off", "Comma list ok."),
    attention: str = option("--attention", "sdpa", "Comma list ok."),
    loss: str = option("--loss", "torch", "Comma list ok."),
    float8: str = option("--float8", "off", "Here off, torchao (gathered in float8 where sharded) or "
                                           "trainperf (every decoder product); comma list ok."),
    vocab: int = option("--vocab", None, "Default: the preset's own (cs336-8b), else 10000."),
    layers: int = option("--layers", None, "Fewer than the model's (a preset or a transformers config): "
                                           "a part of a model too large for one GPU, to calibrate "
                                           "`trainperf predict`."),
    dist_backend: str = option("--dist-backend", None),
    warmup: int = option("--warmup", 2), iters: int = option("--iters", 5),
    timeout: float = TimeoutOpt, out: Path = OutOpt, db: Path = DbOpt, rerun: bool = RerunOpt,
    quiet: bool = QuietOpt, as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """Time the full training step (forward, loss, backward, AdamW) of a model sharded across ranks
    (FSDP2 full or hybrid sharding, or plain data parallel), per sharding and checkpointing choice."""
    from trainperf.attention.registry import NAMES
    from trainperf.workloads.sharded import (
        DEFAULTS,
        FLOAT8,
        OPTIMIZERS,
        SHARDS,
        ShardSpec,
        cannot_fit,
        validate,
    )
    from trainperf.workloads.step import LOSSES

    backend = dist_backend_or_default(dist_backend)
    opts = with_defaults(DEFAULTS.get(backend, DEFAULTS["gloo"]), model=model, seq=seq, batch=batch,
                         dtype=dtype, optimizer=optimizer)  # an unknown backend is refused with the spec
    axes = sweep(model=[preset_or_model(name) for name in parse_list(opts["model"], str, "--model")],
                 world_size=parse_list(world_size, positive_int, "--world-size"),
                 shard=parse_list(shard_mode, str, "--shard", SHARDS),
                 checkpoint=parse_list(checkpoint, str, "--checkpoint"),
                 dtype=parse_list(opts["dtype"], str, "--dtype", ("fp32", "bf16"), DTYPE_ALIASES),
                 optimizer=parse_list(opts["optimizer"], str, "--optimizer", OPTIMIZERS),
                 offload=parse_list(offload, on_off, "--offload"),
                 reshard_after_forward=parse_list(reshard_after_forward, on_off, "--reshard-after-forward"),
                 prefetch=parse_list(prefetch, int, "--prefetch"),
                 unit_layers=parse_list(unit_layers, int, "--unit-layers"),
                 reduce_dtype=parse_list(reduce_dtype, str, "--reduce-dtype", ("fp32", "bf16")),
                 compile=parse_list(compile, on_off, "--compile"),
                 cuda_graph=parse_list(cuda_graph, on_off, "--cuda-graph"),
                 expandable_segments=parse_list(expandable_segments, on_off, "--expandable-segments"),
                 attention=parse_list(attention, str, "--attention", NAMES),
                 loss=parse_list(loss, str, "--loss", LOSSES),
                 float8=parse_list(float8, str, "--float8", FLOAT8))
    if batch_per_rank is not None and batch is not None:
        raise SpecError("give --batch (the global batch) or --batch-per-rank, not both")
    if batch_per_rank is not None and batch_per_rank < 1:
        raise SpecError(f"--batch-per-rank must be positive, got {batch_per_rank}")

    def global_batch(world: int) -> int:
        return opts["batch"] if batch_per_rank is None else batch_per_rank * world

    # FSDP2's units mean nothing to DDP: its cases are measured once, at one layer a unit
    for a in axes:
        if a["shard"] == "none":
            a["unit_layers"] = 1
    specs = list(dict.fromkeys(
        ShardSpec(seq=opts["seq"], batch=global_batch(a["world_size"]), vocab=vocab, layers=layers,
                  blocks=blocks, peak_tflops=peak_tflops, dist_backend=backend, warmup=warmup, iters=iters,
                  **a) for a in axes))
    records = _validate_run_show("shard", specs, validate, SHARD_COLUMNS, backend, out, db, rerun, quiet,
                                 as_json, timeout, precheck=cannot_fit)
    from trainperf.workloads.contributions import CONTRIBUTION_CASE, contributions

    frame = to_frame(records)
    made = contributions(frame)
    if not made.empty:
        made.to_csv(out / "shard_contributions.csv", index=False)
        if not (quiet or as_json):
            title = "what each choice of the fastest case contributed: the same case with one setting changed"
            console.print(frame_table(made, title=title, case=CONTRIBUTION_CASE))
    ok = frame[frame.status == "ok"] if not frame.empty else frame
    if not ok.empty and ok.world_size.nunique() > 1 and plots_available(quiet or as_json):
        path = draw_scaling(ok, out / "shard_scaling.png")
        if not (quiet or as_json):
            err_console.print(f"wrote {path}")
