"""Ctrl-C: trainperf alone speaks after it, and twice stops a command at once.

A Ctrl-C while Inductor compiles reaches the compilers it started (ptxas, g++) too; the compile
fails and the library logs the failure (a kernel's whole source and a traceback) as the
interrupt unwinds. `keep_only` answers that at the first SIGINT: this process's stdout and stderr
are pointed at /dev/null, and trainperf's consoles at copies of where they went.

Python runs its SIGINT handler only between bytecodes. While the main thread sits in one native
call, a CuTe DSL compile of FlashAttention 4 or quack that takes up to a minute, the first Ctrl-C
waits for that call to return before the command stops and says what it kept. The interpreter's
C-level handler also writes the signal's number to its wakeup fd at once, whatever the main thread
is doing. A small watcher process reads that fd and kills the command at the second SIGINT.
Every finished case is already in the store, committed when it ended, so only the case in flight
is lost. Two SIGINTs that arrive together count as one: `timeout -s INT` sends its signal both
to the command and to the command's process group.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading

from rich.console import Console

# The watcher: its own session, so the terminal's Ctrl-C reaches the command and not it; it ends
# when the command does (its end of the socket closes).
WATCHER = r"""
import os, signal, sys, time
command, together, first = int(sys.argv[1]), float(sys.argv[2]), None
while byte := os.read(0, 1):
    if byte[0] != signal.SIGINT:
        continue
    now = time.monotonic()
    if first is None:
        first = now
    if now - first < together:
        continue
    os.write(2, b"\ninterrupted twice: stopped at once; every finished case is in the store\n")
    os.kill(command, signal.SIGKILL)
    break
"""
TOGETHER_S = 0.1  # SIGINTs this close count as one; two presses of Ctrl-C come further apart

_watched: list[object] = []  # the command's end of the socket and the watcher, kept for its life


def stop_at_second_interrupt() -> subprocess.Popen | None:
    """Start the watcher for this process; the watcher, or None where it cannot run (not POSIX,
    not the main thread, or already started)."""
    if os.name != "posix" or threading.current_thread() is not threading.main_thread() or _watched:
        return None
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        watcher = subprocess.Popen([sys.executable, "-S", "-c", WATCHER, str(os.getpid()), str(TOGETHER_S)],
                                   stdin=theirs, start_new_session=True)
    except OSError:  # no process to spare: a single Ctrl-C still stops the command
        ours.close()
        return None
    finally:
        theirs.close()
    signal.set_wakeup_fd(ours.fileno(), warn_on_full_buffer=False)
    os.register_at_fork(after_in_child=_unwatched)
    _watched.extend([ours, watcher])
    return watcher


def keep_only(*consoles: Console) -> None:
    """From now on only `consoles` reach the terminal: file descriptors 1 and 2 point at /dev/null
    (a library's log handlers, its tracebacks, a compiler's output written through them), and so do
    Python's sys.stdout and sys.stderr (a library's print, or its writes to a suite's tee of them);
    each console that wrote to descriptor 1 or 2 writes to a copy of it, and one that writes
    elsewhere (a suite's tee of the terminal and its log) keeps writing there."""
    for console in consoles:
        target = console.file
        try:
            fd = target.fileno()
        except (AttributeError, OSError, ValueError):  # not a descriptor's (a captured stream)
            fd = None
        try:
            console.file = (os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")
                            if fd in (1, 2) else target)
        except OSError:
            continue
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:  # no descriptors to move
        return
    sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the process's life


def _unwatched() -> None:
    """In a forked child: its Ctrl-C is its own, not a second one of the command's."""
    with contextlib.suppress(ValueError):  # forked from another thread: nothing to reset there
        signal.set_wakeup_fd(-1)
