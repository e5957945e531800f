"""A Ctrl-C that a library swallowed still stops the sweep, after the case in flight.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside a weakref
callback or a `__del__` (torch.compile's caches run many) the interpreter prints "Exception
ignored in ..." and carries on, and the command with it. This handler remembers the signal as it
raises, so the sweep stops at the end of the case in flight (`swallowed`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_seen = False


def _remember_and_raise(signum: int, frame: FrameType | None) -> None:
    global _seen
    _seen = True
    raise KeyboardInterrupt


def remember_sigint() -> None:
    """Take SIGINT where Python's default handler has it (not where a caller set its own or
    ignores it), in the main thread only (the only one that may)."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _remember_and_raise)


def forget() -> None:
    """A new sweep starts with no interrupt on record."""
    global _seen
    _seen = False


def swallowed() -> bool:
    """Whether a SIGINT arrived since `forget` (one that was not swallowed never gets here: its
    KeyboardInterrupt stopped the sweep already)."""
    return _seen
