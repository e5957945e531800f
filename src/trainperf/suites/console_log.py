"""A suite run's console kept beside its numbers: what it printed, as `console.txt`.

Both levels of output are teed for the run: Python's `sys.stdout`/`sys.stderr` (trainperf's
tables and progress, which keep the terminal's colours and redraws), and the file descriptors 1
and 2 beneath them, where C++ libraries, compilers and child processes write. The terminal gets
everything as before; the file the lines as a reader sees them at the end, without colours and
without the redraws of progress bars (writes that move the cursor)."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

CURSOR_MOVES = re.compile(r"\x1b\[(\d*[ABCDGHJK]|\?25[lh])")
COLOURS = re.compile(r"\x1b\[[0-9;]*m")


class _Log:
    """The file both levels write to, one write at a time (what `keeps` lets through)."""

    def __init__(self, file: IO[str]) -> None:
        self.file, self.lock = file, threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            self.file.write(COLOURS.sub("", text).replace("\r", ""))
            self.file.flush()


def keeps(text: str) -> bool:
    """Whether the log keeps a write: not one that moves the cursor (a progress bar's redraw)."""
    return not CURSOR_MOVES.search(text)


class _Tee:
    """A stream that writes to `stream` and the log; once the run ends (`detach`), to the stream it
    stood in for alone, for a console that a Ctrl-C pinned to it (cli/interrupts.keep_only). The
    log gets whole lines: `print` writes its text and its newline apart, and a line a library
    writes to the descriptor in between would otherwise land inside the printed one."""

    def __init__(self, stream: IO[str], log: _Log) -> None:
        self.stream, self.log, self.pending = stream, log, ""

    def write(self, text: str) -> int:
        self.stream.write(text)
        if self.log is not None and keeps(text):
            lines, newline, self.pending = (self.pending + text).rpartition("\n")
            if newline:
                self.log.write(lines + newline)
        return len(text)

    def detach(self, stream: IO[str]) -> None:
        self.stream, self.log = stream, None

    def flush(self) -> None:
        if self.log is not None and self.pending:
            self.log.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the terminal's
        return getattr(self.stream, name)


def _pump(source: int, terminal: int, log: _Log) -> None:
    """Copy what reaches a descriptor's pipe to the terminal and the log, until every writer closed it."""
    with os.fdopen(source, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            os.write(terminal, chunk)
            if keeps(text := chunk.decode("utf-8", errors="replace")):
                log.write(text)


@contextmanager
def _descriptor_tee(fd: int, log: _Log) -> Iterator[int]:
    """Point `fd` at a pipe pumped to the terminal and the log; yield a copy of the terminal's fd."""
    terminal = os.dup(fd)
    read, write = os.pipe()
    os.dup2(write, fd)
    os.close(write)
    pump = threading.Thread(target=_pump, args=(read, terminal, log), daemon=True)
    pump.start()
    try:
        yield terminal
    finally:
        os.dup2(terminal, fd)  # the pipe's last writer here: the pump ends once children let go
        pump.join(timeout=5)
        os.close(terminal)


@contextmanager
def console_to(path: Path) -> Iterator[None]:
    """Tee stdout and stderr, Python's and the descriptors', into `path` (appended: a resumed run
    adds to it)."""
    streams = sys.stdout, sys.stderr
    for stream in streams:
        stream.flush()
    with open(path, "a", encoding="utf-8") as file, ExitStack() as stack:
        log = _Log(file)
        terminals = [stack.enter_context(_descriptor_tee(fd, log)) for fd in (1, 2)]
        wrapped = [_Tee(_terminal_stream(stream, fd), log)
                   for stream, fd in zip(streams, terminals, strict=True)]
        sys.stdout, sys.stderr = wrapped
        try:
            yield
        finally:
            sys.stdout, sys.stderr = streams
            for tee, stream in zip(wrapped, streams, strict=True):
                tee.flush()
                if tee.stream is not stream:
                    tee.stream.close()
                tee.detach(stream)
            _stop_multiprocessing_servers()


def _stop_multiprocessing_servers() -> None:
    """Stop multiprocessing's fork server and resource tracker where this process started them (the
    next launch starts them again). Started during the run, they hold the pipes as their stdout and
    stderr, and each pump would wait out its timeout for an end of file they never let come: 10 s
    at the end of every run that launched ranks."""
    from multiprocessing import forkserver, resource_tracker

    servers = (forkserver._forkserver, "_forkserver_pid"), (resource_tracker._resource_tracker, "_pid")
    for server, pid in servers:
        stop = getattr(server, "_stop", None)  # CPython's own, for its tests
        if stop is not None and getattr(server, pid, None) is not None:  # started by this process
            stop()


def _terminal_stream(stream: IO[str], fd: int) -> IO[str]:
    """A text stream that writes where `stream` wrote before its descriptor went to the pipe: the
    terminal itself when `stream` wrote to that descriptor, else `stream` (pytest's capture, say)."""
    try:
        own = stream.fileno() in (1, 2)
    except (AttributeError, OSError, ValueError):
        own = False
    if not own:
        return stream
    return open(os.dup(fd), "w", encoding=getattr(stream, "encoding", None) or "utf-8", buffering=1,
                errors=getattr(stream, "errors", None) or "strict")
