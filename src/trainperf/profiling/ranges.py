"""Hierarchical NVTX + profiler ranges: one per module call, plus phase ranges (fwd, bwd, …).

Module paths become range names by dropping list indices and calling any list of blocks a
`layer`: `layers.3.attn.qkv_proj` → `fwd.layer.attn.qkv_proj`. Each range is both an NVTX range
(for Nsight Systems) and a `record_function` range (for torch.profiler).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

# Step phases, and the attention benchmark's modes (`profile attention`): their kernels count
# whichever thread launched them (autograd launches backward kernels from its own thread).
PHASE_RANGES = {"forward": "fwd", "backward": "bwd", "optimizer": "optimizer", "step": "step",
                "forward-backward": "fwd+bwd"}
_BLOCK_LISTS = {"layers", "h", "blocks", "layer"}


def range_name(module_path: str, root: str = "fwd") -> str:
    """'layers.3.attn.qkv_proj' → 'fwd.layer.attn.qkv_proj' (HF's leading 'model.' is dropped)."""
    parts = [p for p in module_path.split(".") if p and not re.fullmatch(r"\d+", p)]
    if parts[:1] == ["model"]:
        parts = parts[1:]
    return ".".join([root] + ["layer" if p in _BLOCK_LISTS else p for p in parts])


class _Range:
    """One open range: the NVTX push and the profiler's record_function, closed together."""

    def __init__(self, name: str) -> None:
        self.nvtx = torch.cuda.is_available()
        self.rf = torch.autograd.profiler.record_function(name)
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        self.rf.__enter__()

    def close(self) -> None:
        self.rf.__exit__(None, None, None)
        if self.nvtx:
            torch.cuda.nvtx.range_pop()


@contextmanager
def phase_range(phase: str) -> Iterator[None]:
    """A range for a step phase ('forward' → 'fwd', 'backward' → 'bwd', 'optimizer')."""
    r = _Range(PHASE_RANGES.get(phase, phase))
    try:
        yield
    finally:
        r.close()


@contextmanager
def module_ranges(model: nn.Module, root: str = "fwd") -> Iterator[list[str]]:
    """Open a range around every submodule call of `model`; yields the range names in use.

    The model itself gets no range: the forward phase range (`fwd`) already encloses it. Nor do
    modules compiled in place (`module.compile()`) and their children: a hook added there is traced
    into the compiled graph (recompiles, graph breaks), and Inductor's fused kernels cross
    submodule borders anyway; their kernels count in the enclosing range.
    """
    stack: list[_Range] = []
    handles = []
    names = []
    compiled = [p for p, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]
    for path, module in model.named_modules():
        if not path or any(path == c or path.startswith(c + ".") for c in compiled):
            continue
        name = range_name(path, root)
        names.append(name)

        def pre(_m, _args, name=name):  # noqa: ANN001, ANN202
            stack.append(_Range(name))

        def post(_m, _args, _out):  # noqa: ANN001, ANN202
            stack.pop().close()

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    try:
        yield sorted(set(names))
    finally:
        for h in handles:
            h.remove()
        while stack:
            stack.pop().close()
