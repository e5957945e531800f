"""A suite run's console kept beside its numbers: what it printed, as `console.txt`.

stdout and stderr are teed for the run: the terminal gets everything as before, the file the
lines as a reader sees them at the end, without colours and without the redraws of progress bars
(writes that move the cursor)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

CURSOR_MOVES = re.compile(r"\x1b\[(\d*[ABCDGHJK]|\?25[lh])")
COLOURS = re.compile(r"\x1b\[[0-9;]*m")


class _Tee:
    def __init__(self, stream: IO[str], log: IO[str]) -> None:
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.stream.write(text)
        if not CURSOR_MOVES.search(text):
            self.log.write(COLOURS.sub("", text).replace("\r", ""))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the terminal's
        return getattr(self.stream, name)


@contextmanager
def console_to(path: Path) -> Iterator[None]:
    """Tee stdout and stderr into `path` (appended: a resumed run adds to it)."""
    with open(path, "a", encoding="utf-8") as log:
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(out, log), _Tee(err, log)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err
