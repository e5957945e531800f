"""Tables for people (rich), and CSV / JSON / markdown exports for scripts and READMEs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pandas as pd
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from trainperf.core.record import Record

Getter = Callable[[Record], Any]


class Column(NamedTuple):
    """A table column. Its role decides where the console shows it: `case` columns name a case
    (shown where they differ between the table's rows, else once above it), `headline` columns
    are the command's answer (shown as the terminal's width allows), `detail` columns only with
    --wide, `notes` as numbered footnotes under the table; a `frame` column (of a DataFrame shown
    as it is) is a headline column shown once above the table where every row has the same value.
    Files keep every field whatever the role."""

    header: str
    get: Getter
    role: str = "headline"


def case(header: str, name: str) -> Column:
    """A column naming the case by one field of its spec."""
    return Column(header, spec(name), "case")


def detail(header: str, get: Getter) -> Column:
    return Column(header, get, "detail")


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
    """'median ± std' in ms for a phase (the median alone where no std was stored); '-' for
    failed records."""
    def get(r: Record) -> str:
        if r.status != "ok":
            return "-"
        med, std = r.metrics.get(f"{phase}_ms_median"), r.metrics.get(f"{phase}_ms_std")
        if med is None:
            return "-"
        return fmt(med) if std is None else f"{fmt(med)} ± {fmt(std, 2)}"
    return get


# The window's median SM clock and power draw (core.gpu_monitor), beside the times they explain.
GPU_STATE: list[Column] = [detail("MHz", metric("sm_clock_mhz", 4)), detail("W", metric("power_w"))]


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


def outcome() -> list[Column]:
    """The last columns of every workload table: the status, and the notes as footnotes."""
    return [Column("status", status), Column("notes", notes, "notes")]


@dataclass
class TableSettings:
    """How the console shows tables: `wide` (--wide) shows every column, wrapping cells where the
    terminal is too narrow for them."""

    wide: bool = False


TABLES = TableSettings()
BORDER = 3  # rich's default box: a vertical rule and a space of padding each side per column


def _placed(cols: list[Column], cells: dict[str, list[str]]) -> tuple[list[str], list[Column], list[str]]:
    """Where each column goes: `what every case shares` (a case column with one value; a frame
    column with one value over several rows), shown, or left out (a detail, unless --wide)."""
    same, shown, hidden = [], [], []
    for c in cols:
        values = cells[c.header]
        constant = len(set(values)) <= 1
        if c.role == "notes":
            continue
        if not TABLES.wide and constant and (c.role == "case" or c.role == "frame" and len(values) > 1):
            if values and values[0] != "-":
                same.append(f"{c.header} {values[0]}")
        elif c.role == "detail" and not TABLES.wide:
            hidden.append(c.header)
        else:
            shown.append(c)
    return same, shown, hidden


def _footnotes(notes: list[str]) -> tuple[dict[str, int], list[str]]:
    """Each distinct note numbered, and each row's mark ('[2]', or '' without a note)."""
    numbers: dict[str, int] = {}
    for text in notes:
        if text:
            numbers.setdefault(text, len(numbers) + 1)
    return numbers, [f"[{numbers[text]}]" if text else "" for text in notes]


def _fitted(shown: list[Column], cells: dict[str, list[str]], width: int) -> tuple[list[Column], list[str]]:
    """The shown columns within `width` characters with every cell on one line: headline columns
    dropped from the right (never the status, nor a column naming a case); those dropped."""
    def natural(c: Column) -> int:
        return max([len(c.header), *(len(v) for v in cells[c.header])])

    kept, dropped = list(shown), []
    droppable = [c for c in shown if c.role in ("headline", "frame") and c.header != "status"]
    while droppable and sum(natural(c) + BORDER for c in kept) + 1 > width:
        gone = droppable.pop()
        kept.remove(gone)
        dropped.append(gone.header)
    return kept, dropped


def rich_table(records: Sequence[Any], columns: Sequence[Column | tuple[str, Getter]], title: str = "",
               width: int | None = None) -> RenderableType:
    """The records as a console table within `width` characters, every cell on one line: the case
    columns that differ between rows, then the headline columns that fit (right-most dropped
    first, the status kept); what does not differ above the table, notes as numbered footnotes
    under it, and the columns left out named."""
    cols = [Column(*c) for c in columns]
    cells = {c.header: [str(c.get(r)) for r in records] for c in cols}
    same, shown, hidden = _placed(cols, cells)
    notes_col = next((c for c in cols if c.role == "notes"), None)
    footnotes, marks = _footnotes(cells[notes_col.header] if notes_col else [])
    if footnotes:
        shown.append(Column("note", lambda r: "", "notes"))
        cells["note"] = marks
    if width is not None and not TABLES.wide:
        shown, dropped = _fitted(shown, cells, width)
        hidden += dropped
    table = Table(title=title, header_style="bold")
    for c in shown:
        table.add_column(c.header, no_wrap=not TABLES.wide, overflow="fold" if TABLES.wide else "ellipsis")
    for i, r in enumerate(records):
        style = STATUS_STYLE.get(getattr(r, "status", "ok"), "")
        # Text, not markup: a reason such as "pip install 'trainperf[triton]'" prints as written
        table.add_row(*(Text(cells[c.header][i]) for c in shown), style=style)
    parts: list[RenderableType] = []
    if same:
        parts.append(Text("every case: " + ", ".join(same), style="dim"))
    parts.append(table)
    parts += [Text(f"[{n}] {text}", style="dim") for text, n in footnotes.items()]
    if hidden:
        parts.append(Text(f"not shown: {', '.join(hidden)} (--wide shows every column; the CSV has "
                          "every field)", style="dim"))
    return Group(*parts)


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
