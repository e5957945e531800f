"""A Ctrl-C that a library swallowed still stops the sweep, after the case in flight.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside a weakref
callback or a `__del__` (torch.compile's caches run many) the interpreter hands it to
`sys.unraisablehook`, which prints "Exception ignored in ..." with a traceback, and carries on,
and the command with it. This handler remembers the signal as it raises, so the sweep stops at the
end of the case in flight (`swallowed`); the hook is wrapped so that such a KeyboardInterrupt is
remembered and not printed.

A Ctrl-C in a terminal (and `timeout -s INT`) reaches the whole process group, the workers of a
library's process pool included. Inductor's workers ignore it; others (quack's compile pool, which
FlashAttention 4's kernels bring) print a KeyboardInterrupt traceback each. `quiet_forkserver`
starts multiprocessing's fork server with SIGINT blocked, so that no process forked from it ever
takes the signal and trainperf alone decides what a Ctrl-C stops. Blocked rather than ignored,
because a pool may start the server from any thread: any thread may block a signal for itself (the
server and its children inherit the mask), only the main thread may set a handler. Those workers
go on with the work they were given, for the case the Ctrl-C stopped, and at exit the interpreter
waits for all of it (minutes of kernel compiles): `end_worker_processes` ends them once the
command has said what it kept.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

_seen = False
_on_first: list[Callable[[], None]] = []


def _remember_and_raise(signum: int, frame: FrameType | None) -> None:
    global _seen
    if not _seen:
        for act in _on_first:
            act()
    _seen = True
    raise KeyboardInterrupt


def remember_sigint(on_first: Callable[[], None] | None = None) -> None:
    """Take SIGINT where Python's default handler has it (not where a caller set its own or
    ignores it), in the main thread only (the only one that may); `on_first` runs as the first
    SIGINT arrives, before the KeyboardInterrupt is raised."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        if on_first is not None:
            _on_first.append(on_first)
        signal.signal(signal.SIGINT, _remember_and_raise)
        if not getattr(sys.unraisablehook, "remembers_sigint", False):
            sys.unraisablehook = _remembering(sys.unraisablehook)


def take_sigterm_as_interrupt() -> None:
    """A SIGTERM (a Slurm time limit or preemption, plain `timeout`, a container stopping) ends the
    command as a Ctrl-C does: a sweep cut short writes the table of its finished cases and a suite
    its report, where the default action ended the process with neither. Only where SIGTERM has
    its default action, in the main thread; after remember_sigint, whose first-signal actions it
    shares. A process forked from this one takes SIGTERM's default back: a pool ends its workers
    with it (end_worker_processes too)."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _remember_and_raise)
        os.register_at_fork(after_in_child=_default_sigterm)


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the forking thread is the child's main thread


def _remembering(previous: Callable[[object], None]) -> Callable[[object], None]:
    """`previous`, except for a KeyboardInterrupt the interpreter could not raise (module doc):
    remembered as a Ctrl-C, not printed."""
    def hook(unraisable: object) -> None:
        global _seen
        if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            _seen = True
            return
        previous(unraisable)

    hook.remembers_sigint = True  # type: ignore[attr-defined]
    return hook


def end_worker_processes() -> None:
    """End the worker processes this process started through multiprocessing (a library's pool:
    quack's compile pool), whose work was for the case a Ctrl-C stopped (module doc)."""
    for child in multiprocessing.active_children():
        child.terminate()


def quiet_forkserver() -> None:
    """Have multiprocessing start its fork server with SIGINT blocked (module doc); a SIGINT that
    arrives at the starting thread meanwhile waits until the server has started."""
    from multiprocessing import forkserver

    start = forkserver.ForkServer.ensure_running
    if getattr(start, "ignores_sigint", False):
        return

    def ensure_running(self: forkserver.ForkServer) -> None:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return start(self)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    ensure_running.ignores_sigint = True  # type: ignore[attr-defined]
    forkserver.ForkServer.ensure_running = ensure_running  # type: ignore[method-assign]


def forget() -> None:
    """A new sweep starts with no interrupt on record."""
    global _seen
    _seen = False


def swallowed() -> bool:
    """Whether a SIGINT arrived since `forget` (one that was not swallowed never gets here: its
    KeyboardInterrupt stopped the sweep already)."""
    return _seen
