"""SQLite results store: append one record at a time, resume a sweep, query and export.

Each record is committed in its own transaction the moment it is measured, so a crash or Ctrl-C
loses nothing. WAL mode and a busy timeout let several processes append to one file safely.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.core.errors import SpecError
from trainperf.core.legacy import upgrade_spec
from trainperf.core.record import Record, case_key_for
from trainperf.core.sqlite_input import connect_read_only

DEFAULT_DB = "trainperf.db"
RESUMABLE_STATUSES = ("ok", "oom", "unsupported")  # 'error' cases are retried on a rerun
INSTALL_HINT = "pip install"  # in the reason of an unsupported row for a package that was missing
# A record that finishes its case for a resumed sweep: an unsupported row for a missing package does
# not, since the package may be installed now (the row costs little to make again).
_SETTLED = (f"(status IN ('ok', 'oom') OR (status = 'unsupported' AND "
            f"COALESCE(reason, '') NOT LIKE '%{INSTALL_HINT}%'))")
SCHEMA_VERSION = 6  # 1: the one vocabulary; 2: llama's library, float8; 3: comm's timing; 4: shard's
# unit_layers; 5: shard's reduce_dtype; 6: shard's cuda_graph (core/legacy.py)

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
CREATE TABLE IF NOT EXISTS claims (
    case_key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    seen_at REAL NOT NULL DEFAULT 0
);
"""
TABLES = {"records", "sqlite_sequence", "claims"}
# A sweep marks the claim on the case it measures every HEARTBEAT_S; a claim of another machine's
# process unmarked for STALE_S is taken over (that process was killed: a job's time limit, a node lost)
HEARTBEAT_S, STALE_S = 15.0, 120.0


class StoreError(SpecError):
    """The file named as a results store cannot be one: a folder, not SQLite, another program's
    database, not writable. The message names the file and what is wrong with it."""


class Store:
    """A results file. Cheap to open; every method opens its own short-lived connection.
    `create=False` opens an existing store only (for commands that read results)."""

    def __init__(self, path: str | Path = DEFAULT_DB, *, create: bool = True) -> None:
        self.path = Path(path)
        self.read_only = not create  # a store a user names to read is never written to
        name = f"results store {str(path)!r}"
        problem = path_problem(self.path, create)
        if problem:
            raise StoreError(f"{name}: {problem}")
        try:
            con = self._connect()
            try:
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if tables - TABLES:
                    raise StoreError(f"{name}: an SQLite file of another program "
                                     f"(tables {', '.join(sorted(tables))}), not a trainperf results store")
                if create:
                    with con:
                        con.executescript(_SCHEMA)
                        _upgrade_records(con)
                        _upgrade_claims(con)
                elif "records" not in tables:
                    raise StoreError(f"{name}: holds no trainperf records")
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:  # not SQLite, truncated, read-only, locked
            raise StoreError(f"{name}: {_sqlite_problem(exc)}") from None

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return connect_read_only(self.path)
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

    def claim(self, key: str, owner: str, remeasure: bool = False, since: str | None = None) -> bool:
        """Take case `key` for `owner` to measure; False while another live sweep has it, or when
        it is finished (by a record stored at or after `since`, a rerun's start, where given;
        never with `remeasure`). A claim whose process has died (on this machine), or that another
        machine's process has not marked for STALE_S (`holding`), is taken over, so a killed sweep
        never blocks the case."""
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")  # one claimer at a time
            if not remeasure and self._finished(con, key, since):
                con.rollback()
                return False
            row = con.execute("SELECT owner, host, pid, seen_at FROM claims WHERE case_key=?",
                              (key,)).fetchone()
            if row is not None and row[0] != owner and _alive(*row[1:]):
                con.rollback()
                return False
            con.execute("INSERT OR REPLACE INTO claims (case_key, owner, host, pid, seen_at) "
                        "VALUES (?,?,?,?,?)", (key, owner, this_machine(), os.getpid(), time.time()))
            con.commit()
            return True
        finally:
            con.close()

    @contextlib.contextmanager
    def holding(self, key: str, owner: str) -> Iterator[None]:
        """While the body runs, mark `owner`'s claim on case `key` as held every HEARTBEAT_S, so
        that a sweep on another machine sharing the store tells it from a killed one's; release it
        after."""
        stop = threading.Event()

        def mark() -> None:
            while not stop.wait(HEARTBEAT_S):
                with contextlib.suppress(sqlite3.Error):  # a busy store: the next mark comes
                    self._write("UPDATE claims SET seen_at=? WHERE case_key=? AND owner=?",
                                (time.time(), key, owner))

        marker = threading.Thread(target=mark, name="trainperf-claim", daemon=True)
        marker.start()
        try:
            yield
        finally:
            stop.set()
            marker.join()
            self.release(key, owner)

    def claims_of(self, owner: str) -> list[str]:
        """The case keys `owner` holds (a launch's, left by a group that ended inside a case)."""
        con = self._connect()
        try:
            return [row[0] for row in con.execute("SELECT case_key FROM claims WHERE owner=?", (owner,))]
        finally:
            con.close()

    def release(self, key: str, owner: str) -> None:
        """Give case `key` back (measured, failed or interrupted)."""
        self._write("DELETE FROM claims WHERE case_key=? AND owner=?", (key, owner))

    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        """One statement in a transaction of its own."""
        con = self._connect()
        try:
            with con:
                con.execute(sql, args)
        finally:
            con.close()

    @staticmethod
    def _finished(con: sqlite3.Connection, key: str, since: str | None = None) -> bool:
        return con.execute(f"SELECT 1 FROM records WHERE case_key=? AND {_SETTLED} AND created_at >= ? "
                           "LIMIT 1", [key, since or ""]).fetchone() is not None

    def find_case(self, key: str) -> Record | None:
        """The latest finished (not 'error') record with this case key, if any."""
        return self._latest(key, f"status IN ({','.join('?' * len(RESUMABLE_STATUSES))})",
                            list(RESUMABLE_STATUSES))

    def settled_case(self, key: str, since: str | None = None) -> Record | None:
        """The latest record that finishes this case for a resumed sweep (find_case's, less an
        unsupported row for a missing package), if any; only one stored at or after `since`
        where given."""
        return self._latest(key, f"{_SETTLED} AND created_at >= ?", [since or ""])

    def _latest(self, key: str, condition: str, args: list[Any] | None = None) -> Record | None:
        found = self._select(f"case_key=? AND {condition}", [key, *(args or [])], order="id DESC LIMIT 1")
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
        return [Record(workload=w, spec=upgrade_spec(w, json.loads(s)), status=st, metrics=json.loads(m),
                       reason=r, env=json.loads(e), created_at=c, run_id=run)
                for w, s, st, m, r, e, c, run in rows]


def _upgrade_records(con: sqlite3.Connection) -> None:
    """Rewrite records stored under an older schema in today's spec names, with today's case
    keys (so that a resumed sweep finds them). Runs once per store; reads upgrade on the fly."""
    if con.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    rows = con.execute("SELECT id, workload, spec, env FROM records").fetchall()
    for row_id, workload, spec, env in rows:
        old = json.loads(spec)
        new = upgrade_spec(workload, old)
        if new != old:
            con.execute("UPDATE records SET spec=?, case_key=? WHERE id=?",
                        (json.dumps(new, sort_keys=True, default=str),
                         case_key_for(workload, new, json.loads(env)), row_id))
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _upgrade_claims(con: sqlite3.Connection) -> None:
    """Give a store made before claims were marked their `seen_at` (0: a claim left in it is stale)."""
    if "seen_at" not in {row[1] for row in con.execute("PRAGMA table_info(claims)")}:
        con.execute("ALTER TABLE claims ADD COLUMN seen_at REAL NOT NULL DEFAULT 0")


def this_machine() -> str:
    """The host name, and on Linux the boot's id: containers of one host name on other machines, or
    the host before a reboot, are other machines, whose process ids say nothing here."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()} {boot}"


def _alive(host: str, pid: int, seen_at: float) -> bool:
    """Whether the process that made a claim still runs: on this machine, whether its pid does; on
    another, whether it marked the claim within STALE_S."""
    if host != this_machine():
        return time.time() - seen_at < STALE_S
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def path_problem(path: Path, create: bool) -> str | None:
    """What keeps `path` from being a store, judged from the file system alone; None if nothing."""
    if str(path) in ("", "."):
        return "needs a file name"
    try:
        if path.is_dir():
            return "is a folder, not a file"
        if path.exists():
            return None
        if not create:
            return "no such file"
        parent = path.parent
        if not parent.is_dir():
            return f"folder {str(parent)!r} does not exist"
        if not os.access(parent, os.W_OK):
            return f"folder {str(parent)!r} is not writable"
    except OSError as exc:  # a name too long for the file system, a loop of links, ...
        return exc.strerror or str(exc)
    return None


def _sqlite_problem(exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return "not an SQLite file, or a damaged one"
    if "readonly" in text or "unable to open" in text:
        return "cannot be written here (read-only file or folder)"
    return text


def _json_number(value: Any) -> Any:
    """JSON fallback for numpy/torch scalars."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


ENV_COLUMNS = ("gpu_name", "gpu_uuid", "torch", "cuda", "git_commit")


def to_frame(records: Iterable[Record]) -> pd.DataFrame:
    """One row per record: workload, status, reason, spec fields, metrics, key env fields. A metric
    named like a spec field (the step's `loss`: the choice of loss, and its last value) keeps both:
    the metric's column is `NAME_value`."""
    rows = []
    for r in records:
        row: dict[str, Any] = {"workload": r.workload, "status": r.status}
        row.update(r.spec)
        row.update({f"{k}_value" if k in r.spec else k: v for k, v in r.metrics.items()})
        row["reason"] = r.reason
        row.update({f"env_{k}": r.env.get(k) for k in ENV_COLUMNS})
        row["created_at"] = r.created_at
        row["run_id"] = r.run_id
        rows.append(row)
    return pd.DataFrame(rows)
