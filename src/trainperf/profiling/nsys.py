"""Per-range breakdown from an Nsight Systems SQLite export (`nsys export --type sqlite`).

Reads NVTX_EVENTS (push/pop and start/end ranges), CUPTI_ACTIVITY_KIND_RUNTIME (the launch
calls, with their thread) and CUPTI_ACTIVITY_KIND_KERNEL, resolving names through StringIds.
Times in the export are nanoseconds; the Trace is in microseconds like torch.profiler's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from trainperf.core.sqlite_input import connect_read_only
from trainperf.profiling.breakdown import Trace

REQUIRED_TABLES = ("StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")
NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
HOW_TO_EXPORT = ("profile with `nsys profile --trace=cuda,nvtx` and export with "
                 "`nsys export --type sqlite` (or `--export=sqlite`)")


class NsysFormatError(ValueError):
    """The file is not an nsys SQLite export with the tables the decoder needs."""


def read_nsys_sqlite(path: str | Path) -> Trace:
    path = Path(path)
    if not path.exists():
        raise NsysFormatError(f"{path}: no such file")
    try:
        con = connect_read_only(path)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise NsysFormatError(f"{path} is not an SQLite file ({exc})") from None
    try:
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise NsysFormatError(f"{path} lacks the table(s) {', '.join(missing)}; {HOW_TO_EXPORT}")
        strings = "SELECT id, value FROM StringIds"
        ranges = pd.read_sql_query(
            f"""SELECT COALESCE(e.text, s.value) AS name, e.start / 1e3 AS start, e."end" / 1e3 AS "end",
                       e.globalTid AS thread
                FROM NVTX_EVENTS e LEFT JOIN ({strings}) s ON s.id = e.textId
                WHERE e.eventType IN {NVTX_RANGE_TYPES} AND e."end" IS NOT NULL""", con)
        launches = pd.read_sql_query(
            """SELECT correlationId AS correlation, start / 1e3 AS start, globalTid AS thread
               FROM CUPTI_ACTIVITY_KIND_RUNTIME""", con)
        kernels = pd.read_sql_query(
            f"""SELECT k.correlationId AS correlation, COALESCE(s.value, '?') AS name,
                       k.start / 1e3 AS start, k."end" / 1e3 AS "end"
                FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN ({strings}) s ON s.id = k.shortName""", con)
    finally:
        con.close()
    return Trace(ranges, launches, kernels)
