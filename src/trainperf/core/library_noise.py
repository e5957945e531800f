"""Only trainperf speaks: what libraries print about their own internals stays off the console.

Two kinds of library output, each handled by message and module, never by a blanket filter:
  - warnings and log lines that say something true about the case (an SDPA backend that refused
    the inputs, a kernel that fell back, a kernel the compiler could not read) become the record's
    notes, once each (`case_notes`), and are not printed;
  - warnings and log lines about a library's own workings (an optional backend of Liger's that
    cannot import, the CuTe DSL's advice on its own code generation, Inductor's advice on a global
    setting, deprecations inside torch's collectives) are ignored (`quiet_libraries`).
`--verbose` (TRAINPERF_VERBOSE=1, which spawned ranks inherit) shows everything, and the notes
still gather.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

VERBOSE_ENV = "TRAINPERF_VERBOSE"

# Warnings about the case at hand: a backend refused these inputs, a kernel fell back.
CASE_WARNINGS = (
    r"(cuDNN attention|Flash attention|Memory efficient( attention)?) kernel not used because",
    r"(Flash|cuDNN) attention has been runtime disabled",
    r"(?i).*fall(s|ing)? back to",
)
# (message, module) of warnings about a library's internals.
INTERNAL_WARNINGS = (
    (r".*", r"cutlass\.base_dsl(\..*)?"),  # the CuTe DSL's own advice, with its source line
    (r"Backend impl .* could not be imported", r"liger_kernel(\..*)?"),
    (r".*reduce_scatter_tensor.*deprecated", r"torch\.distributed(\..*)?"),
    (r".*Profiler clears events at the end of each cycle", r".*"),
    # Inductor's advice to turn on TF32 for float32 products, given at a compile whatever its dtypes
    (r"TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled",
     r"torch\._inductor(\..*)?"),
    # Dynamo tracing through the lru_cache of a library's own helper (Liger's device checks)
    (r"Dynamo detected a call to a `functools\.lru_cache`-wrapped function", r"torch\._dynamo(\..*)?"),
)
# (logger, message) of log lines about a library's internals; a logger's filter sees only the
# records of that logger itself, so the name is the one that logs (liger-kernel's registry of
# per-vendor backends warns about each vendor's it cannot import, Ascend's on NVIDIA GPUs).
INTERNAL_LOGS = (("liger_kernel.backends.registry", r"Backend impl .* could not be imported"),
                 # Dynamo's reminder, at a compile of any selective checkpoint, that its region must not
                 # modify tensors in place (trainperf's policies' gradients are tested against eager)
                 ("torch._higher_order_ops.wrap", r"context_fn is passed to torch\.utils\.checkpoint"),
                 # spawn ending the other ranks once one failed: trainperf names the failing rank
                 ("torch.multiprocessing.spawn", r"Terminating process \d+ via signal SIGTERM"),
                 # a compile on the CPU of a machine whose CUDA toolkit has no GPU to run on (say,
                 # CUDA_VISIBLE_DEVICES="")
                 ("torch.utils.cpp_extension", r"No CUDA runtime is found, using CUDA_HOME"))
# (logger, message) of log lines about the case: torch.compile could not read which inputs a Triton
# kernel of the case writes (Liger's, under compile) and takes all of them as written, which may
# cost the compiled step copies; logged with the parser's whole traceback at every trace.
CASE_LOGS = (("torch._dynamo", r"Encountered an exception in identify_(mutated|accessed)_tensors"),)


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


class _Matching(logging.Filter):
    """Drops a matching log line. Given `notes`, the line also becomes a note there, once and
    without its traceback (the exception's last line: a Triton compile error's first lines are
    a source excerpt), and is still printed if verbose."""

    def __init__(self, pattern: str, notes: list[str] | None = None) -> None:
        super().__init__()
        self.pattern, self.notes = re.compile(pattern), notes

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.pattern.search(record.getMessage()):
            return True
        if self.notes is None:
            return False
        text = " ".join(record.getMessage().split())
        if not any(note.startswith(text) for note in self.notes):  # once, whatever the exception
            error = record.exc_info[1] if record.exc_info else None
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            self.notes.append(text + (f" ({type(error).__name__}: {lines[-1]})" if lines else ""))
        return verbose()


def quiet_libraries() -> None:
    """Ignore the libraries' talk about themselves (unless verbose). Kineto writes a `USDT:...`
    line for each profiled window on the CPU build; level 6 is above all its levels (a user's own
    setting wins)."""
    if verbose():
        return
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    for message, module in INTERNAL_WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)
    for name, message in INTERNAL_LOGS:
        logging.getLogger(name).addFilter(_Matching(message))


def is_case_warning(text: str) -> bool:
    return any(re.match(pattern, text) for pattern in CASE_WARNINGS)


@contextmanager
def case_notes() -> Iterator[list[str]]:
    """Collect the case's warnings (CASE_WARNINGS) and log lines (CASE_LOGS), each once, into the
    yielded list instead of printing them (verbose: printed too); others take their usual course."""
    notes: list[str] = []
    shown = warnings.showwarning
    loggers = [(logging.getLogger(name), _Matching(message, notes)) for name, message in CASE_LOGS]

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001, ANN202
        text = " ".join(str(message).split())
        if is_case_warning(text):
            if text not in notes:
                notes.append(text)
            if not verbose():
                return
        shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        for pattern in CASE_WARNINGS:  # every case sees its own, not only the first one's
            warnings.filterwarnings("always", message=pattern)
        warnings.showwarning = show
        for logger, note in loggers:
            logger.addFilter(note)
        try:
            yield notes
        finally:
            warnings.showwarning = shown
            for logger, note in loggers:
                logger.removeFilter(note)
