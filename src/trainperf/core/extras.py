"""Whether an optional extra works here, not only whether it is installed.

An install can be present and still not import. nvidia-cutlass-dsl 4.8, for one, keeps its Python
sources in a wheel of their own (nvidia-cutlass-dsl-libs-core). Where that wheel is missing,
FlashAttention 4 and quack-kernels are found but fail on their first use ("No module named
'cutlass.cute'", "... 'cutlass.cutlass_dsl'"). A recipe that needs the extra then gives an
`unsupported` row naming why, instead of an error on every case.
"""

from __future__ import annotations

import importlib
from importlib.util import find_spec


def import_problem(module: str) -> str | None:
    """None where `module` imports; otherwise why not: "not installed", or the first line of the
    error its import raised."""
    try:
        if find_spec(module.split(".")[0]) is None:
            return "not installed"
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - a part missing, a build for another torch or CUDA: all are the answer
        lines = str(e).splitlines()
        return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
    return None


def broken_install(problem: str | None) -> str:
    """What an `unsupported` row adds where an extra is installed but does not import (its
    import_problem), else nothing."""
    return f" (installed, but its import fails: {problem})" if problem not in (None, "not installed") else ""
