"""A sweep's progress: a live bar on a terminal; anywhere else (a log file, Slurm's or CI's output)
one plain line per finished case, since a bar's redraws do not survive in a file and its last
frame, cut to the log's width, names no case."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def elapsed_text(seconds: float) -> str:
    """H:MM:SS, as the bar's own elapsed-time column shows it."""
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class SweepProgress:
    """Progress over `total` cases of `workload` on `console` (nothing with `quiet`). `show` names
    the case in flight, `done` counts finished cases; `console` prints beside either form."""

    def __init__(self, workload: str, total: int, console: Console, quiet: bool = False) -> None:
        self.workload, self.total, self.console, self.quiet = workload, total, console, quiet
        self.live = console.is_terminal and not quiet
        self.completed, self.case, self._start = 0, "", time.monotonic()
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.fields[case]}"), console=console,
                             disable=not self.live)
        self._task = self._bar.add_task(workload, total=total, case="")

    def __enter__(self) -> SweepProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._bar.__exit__(kind, exc, tb)

    def show(self, case: str) -> None:
        """Name the case in flight (on the bar only: a log gets its line when it finishes)."""
        self.case = case
        self._bar.update(self._task, case=case)

    def done(self, completed: int, outcome: str = "") -> None:
        """`completed` cases are finished; off a terminal, a line saying so, with the case in
        flight and its `outcome` where given."""
        if completed == self.completed:
            return
        self.completed = completed
        self._bar.update(self._task, completed=completed)
        if self.live or self.quiet:
            return
        what = ": ".join(part for part in (self.case, outcome) if part)
        self.console.print(f"{self.workload} {completed}/{self.total} "
                           f"{elapsed_text(time.monotonic() - self._start)} {what}".rstrip(),
                           markup=False, highlight=False, soft_wrap=True)

    def finished(self, case: str, outcome: str, completed: int | None = None) -> None:
        """Case `case` is finished with `outcome`, the `completed`-th (by default the next)."""
        self.show(case)
        self.done(self.completed + 1 if completed is None else completed, outcome)
