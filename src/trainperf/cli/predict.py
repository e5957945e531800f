"""Prediction commands: predict (a step on many GPUs, per sharding choice) and predict-check (the
model against every measured multi-GPU row)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from trainperf.cli.common import (
    JsonOpt,
    OutOpt,
    QuietOpt,
    WideOpt,
    app,
    check_out_dir,
    cli_errors,
    console,
    err_console,
    frame_table,
    plots_available,
)
from trainperf.cli.vocabulary import RenamedFlags, option
from trainperf.core import report
from trainperf.core.errors import SpecError
from trainperf.core.spec import on_off, parse_list, parse_one, positive_int

ResultsOpt = option("--results", Path("benchmarks/results"))
SHOWN = ["gpus", "nodes", "shard", "step_ms", "tokens_per_s_per_gpu", "mfu", "exposed_comm_ms",
         "mem_gb_per_rank", "fits"]
WORST_SHOWN = 10


def _results_dir(results: Path) -> Path:
    if not results.is_dir():
        raise SpecError(f"--results {results}: not a folder of results (CSV files of trainperf's commands)")
    return results


@app.command(cls=RenamedFlags)
@cli_errors
def predict(
    model: str = option("--model", "cs336-8b", "Here any model with a one-GPU shard record (a GPT LM "
                                               "preset, hf:, a config.json)."),
    gpus: str = option("--gpus", "8,64,512"),
    gpus_per_node: int = option("--gpus-per-node", 8),
    inter_node: str = option("--inter-node", None, "Default: measured, from `comm --scope cross` records."),
    shard: str = option("--shard", "full,hybrid,none", "Comma list ok."),
    gpu: str = option("--gpu", None),
    checkpoint: str = option("--checkpoint", None, "Here: the calibration's (default: any)."),
    float8: str = option("--float8", None, "Here: the calibration's (default: any)."),
    attention: str = option("--attention", None, "Here: the calibration's (default: any)."),
    compile: str = option("--compile", None, "Here: the calibration's, off or on (default: any)."),
    cuda_graph: str = option("--cuda-graph", None, "Here: the calibration's (default: any)."),
    batch_per_rank: int = option("--batch-per-rank", None, "Default: the calibration's."),
    results: Path = ResultsOpt,
    out: Path = OutOpt, quiet: bool = QuietOpt, as_json: bool = JsonOpt, wide: bool = WideOpt,
) -> None:
    """Predict a model's training step on many GPUs per sharding choice (FSDP2, HSDP, DDP): step,
    tokens/s per GPU, MFU, exposed communication and memory per rank, from its one-GPU step and
    this machine's collectives in the results, with the error the model showed on measured rows."""
    from trainperf.models.presets import PRESETS
    from trainperf.models.source import ModelSource, is_model_source
    from trainperf.predict.links import parse_rate
    from trainperf.predict.scaling import draw, find_calibration, predict_scaling
    from trainperf.workloads.sharded import SHARDS

    if is_model_source(model):
        ModelSource(model).check()
    else:
        model = parse_one(model, str, "--model", PRESETS)
    counts = parse_list(gpus, positive_int, "--gpus")
    shards = parse_list(shard, str, "--shard", SHARDS)
    if gpus_per_node < 1:
        raise SpecError(f"--gpus-per-node must be positive, got {gpus_per_node}")
    if batch_per_rank is not None and batch_per_rank < 1:
        raise SpecError(f"--batch-per-rank must be positive, got {batch_per_rank}")
    rate = None if inter_node is None else parse_rate(inter_node)
    if gpu is not None and not gpu.strip():
        raise SpecError("--gpu needs part of a GPU's name, such as H200")
    choices = {name: parse_one(text, str, f"--{name}") for name, text in
               (("checkpoint", checkpoint), ("float8", float8), ("attention", attention)) if text is not None}
    for name, text in (("compile", compile), ("cuda_graph", cuda_graph)):
        if text is not None:
            choices[name] = parse_one(text, on_off, f"--{name.replace('_', '-')}")
    check_out_dir(out)
    root = _results_dir(results)
    cal = find_calibration(root, model, gpu, choices)
    frame = predict_scaling(root, cal, counts, shards, gpus_per_node, rate, batch_per_rank)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "predict.csv", index=False)
    if as_json:
        sys.stdout.write(report.export(frame, "json"))
        return
    if not quiet:
        c = cal.spec
        console.print(f"calibration: {cal.source}, {c.model} {c.batch}x{c.seq}, checkpoint {c.checkpoint}, "
                      f"attention {c.attention}, float8 {c.float8}, compiled {c.compile}, "
                      f"graphed {c.cuda_graph}; {frame.inputs.iloc[0].split('; ', 1)[1]}; "
                      f"contention {frame.contention.iloc[0]:.2f}", soft_wrap=True, highlight=False)
        first = frame.iloc[0]
        memory = first.checked_mem_error_median
        memory = "" if math.isnan(memory) else f", of the memory a rank holds {memory:.1%}"
        console.print(f"checked error: median |predicted / measured - 1| {first.checked_error_median:.1%} "
                      f"over {first.checked_rows} measured multi-GPU rows of {cal.gpu}{memory} "
                      "(predict-check)", soft_wrap=True, highlight=False)
        shown = frame[SHOWN].assign(fits=frame.fits.map({True: "yes", False: "no"}).fillna("?"))
        console.print(frame_table(shown, title=f"trainperf predict: {model} on {gpu or cal.gpu}"))
        err_console.print(f"wrote {out / 'predict.csv'}; how good the model is: trainperf predict-check")
    if plots_available(quiet):
        path = draw(frame, out / "predict.png")
        if not quiet:
            err_console.print(f"wrote {path}")


@app.command("predict-check", cls=RenamedFlags)
@cli_errors
def predict_check(
    results: Path = ResultsOpt,
    out: Path = OutOpt, quiet: bool = QuietOpt, as_json: bool = JsonOpt, wide: bool = WideOpt,
) -> None:
    """Check the step model of `trainperf predict` against every measured multi-GPU shard and ddp row
    in the results: each predicted from parts measured apart from it, beside what was measured."""
    from trainperf.predict.check import check, draw, summary

    check_out_dir(out)
    frame = check(_results_dir(results))
    if frame.empty:
        raise SpecError(f"--results {results}: no multi-GPU shard or ddp rows to check")
    table = summary(frame)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "predict_check.csv", index=False)
    table.to_csv(out / "predict_check_summary.csv", index=False)
    if as_json:
        sys.stdout.write(report.export(frame, "json"))
        return
    if not quiet:
        title = "the step model against measured rows: |predicted / measured - 1|"
        console.print(frame_table(table, title=title))
        worst = frame.dropna(subset=["step_error"]).sort_values("step_error", key=abs, ascending=False)
        cols = ["run", "case", "step_ms_measured", "step_ms_predicted", "step_error"]
        console.print(frame_table(worst[cols].head(WORST_SHOWN), title=f"the {WORST_SHOWN} largest errors"))
        missing = frame[frame.reason != ""]
        if not missing.empty:
            err_console.print(f"{len(missing)} rows not predicted (predict_check.csv says why)")
        err_console.print(f"wrote {out / 'predict_check.csv'}, {out / 'predict_check_summary.csv'}")
    if plots_available(quiet) and frame.step_error.notna().any():
        path = draw(frame.dropna(subset=["step_error"]), out / "predict_check.png")
        if not quiet:
            err_console.print(f"wrote {path}")
