"""SQLite results store: append one record at a time, resume a sweep, query and export.

Each record is committed in its own transaction the moment it is measured, so a crash or Ctrl-C
loses nothing. WAL mode and a busy timeout let several processes append to one file safely.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.core.record import Record

DEFAULT_DB = "trainperf.db"
RESUMABLE_STATUSES = ("ok", "oom", "unsupported")  # 'error' cases are retried on a rerun

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    case_key TEXT NOT NULL,
    workload TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    spec TEXT NOT NULL,
    metrics TEXT NOT NULL,
    env TEXT NOT NULL,
    created_at TEXT NOT NULL,
    run_id TEXT
);
CREATE INDEX IF NOT EXISTS records_case ON records(case_key);
CREATE INDEX IF NOT EXISTS records_workload ON records(workload);
"""


class Store:
    """A results file. Cheap to open; every method opens its own short-lived connection."""

    def __init__(self, path: str | Path = DEFAULT_DB) -> None:
        self.path = Path(path)
        with self._connect() as con:
            con.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=60)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA busy_timeout=60000")
        return con

    def append(self, record: Record) -> int:
        """Store one record durably; returns its row id."""
        row = (record.key, record.workload, record.status, record.reason,
               json.dumps(record.spec, sort_keys=True, default=str),
               json.dumps(record.metrics, default=_json_number),
               json.dumps(record.env, sort_keys=True, default=str),
               record.created_at, record.run_id)
        con = self._connect()
        try:
            with con:
                cur = con.execute(
                    "INSERT INTO records (case_key, workload, status, reason, spec, metrics, env,"
                    " created_at, run_id) VALUES (?,?,?,?,?,?,?,?,?)", row)
            return int(cur.lastrowid)
        finally:
            con.close()

    def find_case(self, key: str) -> Record | None:
        """The latest finished (not 'error') record with this case key, if any."""
        found = self._select(f"case_key=? AND status IN ({','.join('?' * len(RESUMABLE_STATUSES))})",
                             [key, *RESUMABLE_STATUSES], order="id DESC LIMIT 1")
        return found[0] if found else None

    def records(self, workload: str | None = None, status: str | None = None,
                run_id: str | None = None) -> list[Record]:
        """Records in insertion order, optionally filtered."""
        where, args = [], []
        for col, val in (("workload", workload), ("status", status), ("run_id", run_id)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(val)
        return self._select(" AND ".join(where), args)

    def _select(self, where: str, args: list[Any], order: str = "id") -> list[Record]:
        sql = "SELECT workload, spec, status, metrics, reason, env, created_at, run_id FROM records"
        if where:
            sql += " WHERE " + where
        con = self._connect()
        try:
            rows = con.execute(f"{sql} ORDER BY {order}", args).fetchall()
        finally:
            con.close()
        return [Record(workload=w, spec=json.loads(s), status=st, metrics=json.loads(m), reason=r,
                       env=json.loads(e), created_at=c, run_id=run) for w, s, st, m, r, e, c, run in rows]


def _json_number(value: Any) -> Any:
    """JSON fallback for numpy/torch scalars."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


ENV_COLUMNS = ("gpu_name", "torch", "cuda", "git_commit")


def to_frame(records: Iterable[Record]) -> pd.DataFrame:
    """One row per record: workload, status, reason, spec fields, metrics, key env fields."""
    rows = []
    for r in records:
        row: dict[str, Any] = {"workload": r.workload, "status": r.status}
        row.update(r.spec)
        row.update(r.metrics)
        row["reason"] = r.reason
        row.update({f"env_{k}": r.env.get(k) for k in ENV_COLUMNS})
        row["created_at"] = r.created_at
        row["run_id"] = r.run_id
        rows.append(row)
    return pd.DataFrame(rows)
