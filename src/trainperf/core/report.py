"""Tables for people (rich), and CSV / JSON / markdown exports for scripts and READMEs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
from rich.table import Table
from rich.text import Text

from trainperf.core.record import Record

Getter = Callable[[Record], Any]
Column = tuple[str, Getter]


def fmt(value: Any, digits: int = 3) -> str:
    """Numbers with `digits` significant figures; None/NaN as '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 10 ** digits:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def metric(name: str, digits: int = 3, scale: float = 1.0) -> Getter:
    """Getter for one metric of an ok record (scaled); '-' for failed records."""
    def get(r: Record) -> str:
        if r.status != "ok":
            return "-"
        v = r.metrics.get(name)
        return fmt(v * scale if isinstance(v, (int, float)) else v, digits)
    return get


def timing(phase: str) -> Getter:
    """'median ± std' in ms for a phase; '-' for failed records."""
    def get(r: Record) -> str:
        if r.status != "ok":
            return "-"
        med, std = r.metrics.get(f"{phase}_ms_median"), r.metrics.get(f"{phase}_ms_std")
        return "-" if med is None else f"{fmt(med)} ± {fmt(std, 2)}"
    return get


# The window's median SM clock and power draw (core.gpu_monitor), beside the times they explain.
GPU_STATE: list[Column] = [("MHz", metric("sm_clock_mhz", 4)), ("W", metric("power_w"))]


def status(r: Record) -> str:
    return r.status if r.status == "ok" else r.status.upper()


def spec(name: str) -> Getter:
    return lambda r: fmt(r.spec.get(name))


def notes(r: Record) -> str:
    """Why a case failed, or the measurement notes of a good one, with heat or the hardware named
    where they held the GPU's clock down while it was timed (core.gpu_monitor)."""
    if r.status != "ok":
        return r.reason or ""
    throttled = r.metrics.get("clock_throttled")
    told = [r.metrics.get("notes", ""), f"clock throttled: {throttled}" if throttled else ""]
    return "; ".join(t for t in told if t)


STATUS_STYLE = {"ok": "", "oom": "yellow", "unsupported": "magenta", "error": "red"}


def rich_table(records: Sequence[Any], columns: Sequence[Column], title: str = "") -> Table:
    table = Table(title=title, header_style="bold")
    for header, _ in columns:
        table.add_column(header, overflow="fold", max_width=48 if header == "notes" else None)
    for r in records:
        style = STATUS_STYLE.get(getattr(r, "status", "ok"), "")
        # Text, not markup: a reason such as "pip install 'trainperf[triton]'" prints as written
        table.add_row(*(Text(str(get(r))) for _, get in columns), style=style)
    return table


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of a DataFrame."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(fmt(row[c]).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n"


def export(df: pd.DataFrame, fmt_name: str) -> str:
    """The frame as csv, json (a list of objects) or markdown text."""
    if fmt_name == "csv":
        return df.to_csv(index=False)
    if fmt_name == "json":
        return json.dumps(json.loads(df.to_json(orient="records")), indent=1) + "\n"
    if fmt_name == "markdown":
        return markdown(df)
    raise ValueError(f"unknown format {fmt_name!r}; valid choices: csv, json, markdown")
