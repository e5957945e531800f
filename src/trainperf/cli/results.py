"""Result commands: results, export, env, compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from trainperf.cli.common import (
    DbOpt,
    DeviceOpt,
    OutOpt,
    WideOpt,
    app,
    check_out_dir,
    check_out_file,
    cli_errors,
    console,
    device_or_fail,
    err_console,
    fail,
    frame_table,
    plots_available,
)
from trainperf.cli.vocabulary import RenamedFlags, option
from trainperf.core import env as envmod
from trainperf.core import report
from trainperf.core.errors import SpecError
from trainperf.core.record import Record
from trainperf.core.spec import check_choice
from trainperf.core.store import Store, to_frame


@app.command(cls=RenamedFlags)
@cli_errors
def compare(
    sets: list[Path] = typer.Argument(..., help="Two or more training_timing.csv files or .db stores."),
    axis: str = option("--axis", "gpu"),
    out: Path = OutOpt,
    wide: bool = WideOpt,
) -> None:
    """Set llama result sets from different runs side by side, with speed-ups and plots."""
    from trainperf.profiling.compare import (
        CONTEXT,
        context_warnings,
        label_sets,
        load_result_set,
        pairing_warnings,
        plot_comparison,
        side_by_side,
    )

    if len(sets) < 2:
        raise SpecError("compare needs at least two result sets")
    if axis not in CONTEXT:
        raise SpecError(f"--axis {axis!r}; valid choices: {', '.join(CONTEXT)}")
    check_out_dir(out)
    try:
        frames = [load_result_set(p) for p in sets]
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    labels = label_sets(sets, frames)
    table = side_by_side(frames, labels)
    for w in [*context_warnings(frames, labels, axis), *pairing_warnings(frames, labels, table)]:
        err_console.print(f"[yellow]warning:[/yellow] {w}", soft_wrap=True)
    console.print(frame_table(table, title="trainperf compare"))
    for path in plot_comparison(table, labels, out) if plots_available(quiet=False) else []:
        err_console.print(f"wrote {path}")


@app.command(cls=RenamedFlags)
@cli_errors
def results(
    workload: str = option("--workload", None),
    status: str = option("--status", None),
    last: int = option("--last", 50),
    db: Path = DbOpt,
    wide: bool = WideOpt,
) -> None:
    """List stored records."""
    check_filters(workload, status)
    if last < 1:
        raise SpecError(f"--last must be positive, got {last}")
    recs = Store(db, create=False).records(workload=workload, status=status)[-last:]
    cols: list[report.Column] = [
        ("workload", lambda r: r.workload), ("case", lambda r: _case_text(r)),
        ("status", report.status), ("main metric", _headline),
        ("gpu", lambda r: r.env.get("gpu_name") or "cpu"),
        ("when", lambda r: r.created_at[:19]), report.Column("notes", report.notes, "notes")]
    console.print(report.rich_table(recs, cols, title=f"{len(recs)} records in {db}", width=console.width))


WORKLOADS = ("step", "attention", "kernels", "llama", "parity", "comm", "ddp")
STATUSES = ("ok", "oom", "unsupported", "error")


def check_filters(workload: str | None, status: str | None) -> None:
    """SpecError for a --workload or --status that no record can have."""
    if workload is not None:
        check_choice("--workload", workload, WORKLOADS)
    if status is not None:
        check_choice("--status", status, STATUSES)


def _case_text(r: Record) -> str:
    skip = {"device", "warmup", "iters"}
    return " ".join(f"{k}={v}" for k, v in r.spec.items() if k not in skip)


def _headline(r: Record) -> str:
    for key in ("step_ms_median", "time_ms_median", "iter_s_median", "busbw_gbps", "loss_last"):
        if key in r.metrics:
            return f"{key}={report.fmt(r.metrics[key])}"
    return "-" if r.status == "ok" else r.status.upper()


@app.command(cls=RenamedFlags)
@cli_errors
def export(
    format: str = option("--format", "csv"),
    output: Path = option("--file", None, "Default: stdout.", "-o"),
    workload: str = option("--workload", None),
    db: Path = DbOpt,
) -> None:
    """Write stored records as CSV, JSON or markdown."""
    if format not in ("csv", "json", "markdown"):
        fail(f"unknown --format {format!r}; valid choices: csv, json, markdown")
    check_filters(workload, None)
    if output is not None:
        check_out_file(output, "--file")
    text = report.export(to_frame(Store(db, create=False).records(workload=workload)), format)
    if output:
        output.write_text(text)
        err_console.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


@app.command("env", cls=RenamedFlags)
def env_cmd(device: str = DeviceOpt) -> None:
    """Print the environment as trainperf records it."""
    try:
        dev = envmod.resolve_device(device)
    except ValueError as exc:
        fail(str(exc))
    console.print_json(json.dumps(envmod.capture(dev), default=str))




@app.command(cls=RenamedFlags)
@cli_errors
def precision(device: str = DeviceOpt, wide: bool = WideOpt) -> None:
    """Dtypes under each autocast mode, and the float accumulation experiment."""
    from trainperf.profiling.precision import accumulation_experiment, dtype_report

    dev = device_or_fail(device)
    console.print(frame_table(dtype_report(dev), title=f"dtypes under autocast ({dev.type})"))
    console.print(frame_table(accumulation_experiment(), title="summing 0.01 a thousand times"))
