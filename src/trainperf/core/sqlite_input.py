"""Open an SQLite file a user named as input without writing anything beside it.

A plain connection, even `mode=ro`, makes `-wal` and `-shm` files next to a database in WAL mode.
A file that no process has open (no `-wal` beside it) is opened `immutable=1`, which writes
nothing; a live one (a sweep writing to it now) is opened `mode=ro`, which sees its latest
records and only joins the files its writer already made."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def connect_read_only(path: str | Path, timeout: float = 60) -> sqlite3.Connection:
    path = Path(path).resolve()
    live = Path(f"{path}-wal").exists()
    return sqlite3.connect(f"{path.as_uri()}?{'mode=ro' if live else 'immutable=1'}", uri=True,
                           timeout=timeout)
