"""Hierarchical NVTX + profiler ranges: one per module call, plus phase ranges (fwd, bwd, …).

Module paths become range names by dropping list indices and calling any list of blocks a
`layer`: `layers.3.attn.qkv_proj` → `fwd.layer.attn.qkv_proj` in the forward, and
`bwd.layer.attn.qkv_proj` around its backward. Each range is both an NVTX range
(for Nsight Systems) and a `record_function` range (for torch.profiler).
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch import nn

# Step phases, and the attention benchmark's modes (`profile attention`): their kernels count
# whichever thread launched them (autograd launches backward kernels from its own thread).
PHASE_RANGES = {"forward": "fwd", "backward": "bwd", "optimizer": "optimizer", "step": "step",
                "forward-backward": "fwd+bwd"}
T = TypeVar("T")
# Modules that wrap another without adding work: checkpointing, torch.compile, FSDP1.
_WRAPPERS = {"_checkpoint_wrapped_module", "_orig_mod", "_fsdp_wrapped_module"}
_BLOCK_LISTS = {"layers", "h", "blocks", "layer"}
# A Hugging Face Llama's modules under the names of trainperf's LM and of NVIDIA's cuDNN study
# (model.layers.N.input_layernorm → fwd.layer.attn.prenorm), so their profiles line up.
HF_NAMES = {"self_attn": "attn.attn", "input_layernorm": "attn.prenorm",
            "post_attention_layernorm": "mlp.prenorm", "mlp": "mlp.mlp", "norm": "output_norm",
            "embed_tokens": "embed"}


def range_name(module_path: str, root: str = "fwd", blocks: str | None = None) -> str:
    """'layers.3.attn.qkv_proj' → 'fwd.layer.attn.qkv_proj'; a Hugging Face model's 'model.' is
    dropped and its module names become HF_NAMES' ('model.layers.3.self_attn' → 'fwd.layer.attn.attn').
    `blocks`, the path of a model's repeated blocks (models/source.py), is a `layer` too
    ('transformer.h.3.attn' → 'fwd.layer.attn')."""
    if blocks and (module_path == blocks or module_path.startswith(blocks + ".")):
        module_path = "layers" + module_path[len(blocks):]
    parts = [p for p in module_path.split(".") if p and not re.fullmatch(r"\d+", p) and p not in _WRAPPERS]
    while parts[:1] in (["module"], ["lm"]):  # DDP's wrapper; the sharded step's LM-and-loss module
        parts = parts[1:]
    if parts[:1] == ["model"]:
        parts = [HF_NAMES.get(p, p) for p in parts[1:]]
    return ".".join([root] + ["layer" if p in _BLOCK_LISTS else p for p in parts])


class _Range:
    """One open range: the NVTX push and the profiler's record_function, closed together."""

    def __init__(self, name: str) -> None:
        self.name = name
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


# Each thread's open module ranges, innermost last: the backward's run on autograd's thread.
_OPEN = threading.local()


def _open_ranges() -> list[tuple[nn.Module, _Range]]:
    if not hasattr(_OPEN, "ranges"):
        _OPEN.ranges = []
    return _OPEN.ranges


def in_sub_range(leaf: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` inside a range `<innermost open module range>.<leaf>`, for work inside
    a module that is not a module itself (a functional attention or RoPE call). Just the call when
    no module range is open on this thread, or while torch.compile traces it (no graph break)."""
    if torch.compiler.is_compiling() or not _open_ranges():
        return fn(*args, **kwargs)
    r = _Range(f"{_open_ranges()[-1][1].name}.{leaf}")
    try:
        return fn(*args, **kwargs)
    finally:
        r.close()


@contextmanager
def module_ranges(model: nn.Module, root: str = "fwd", blocks: str | None = None) -> Iterator[list[str]]:
    """Open a range around every submodule call of `model`, and around its backward
    (`bwd.layer.attn`, opened by backward hooks on the thread where autograd runs it); yields the
    forward range names in use.

    The model itself gets no range: the phase ranges (`fwd`, `bwd`) already enclose it. Nor do
    modules compiled in place (`module.compile()`) and their children: a hook added there is traced
    into the compiled graph (recompiles, graph breaks), and Inductor's fused kernels cross
    submodule borders anyway; their kernels count in the enclosing range.
    """
    def push(module: nn.Module, name: str) -> None:
        _open_ranges().append((module, _Range(name)))

    def pop(module: nn.Module) -> None:
        """Close `module`'s range, and any opened after it that never closed (a backward hook
        that did not fire), so ranges stay nested."""
        opened = _open_ranges()
        if any(m is module for m, _ in opened):
            while opened:
                m, r = opened.pop()
                r.close()
                if m is module:
                    return

    handles = []
    names = []
    compiled = [p for p, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]
    for path, module in model.named_modules():
        if not path or any(path == c or path.startswith(c + ".") for c in compiled):
            continue
        name, back = range_name(path, root, blocks), range_name(path, "bwd", blocks)
        if name == root:  # a Hugging Face model's body (`model`): the phase range already holds it
            continue
        names.append(name)
        handles += [module.register_forward_pre_hook(lambda m, _a, name=name: push(m, name)),
                    module.register_forward_hook(lambda m, _a, _o: pop(m)),
                    module.register_full_backward_pre_hook(lambda m, _g, back=back: push(m, back)),
                    module.register_full_backward_hook(lambda m, _gi, _go: pop(m))]
    try:
        with warnings.catch_warnings():  # a module whose inputs take no gradient: its range is empty
            warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients")
            # a module returning an output object (a transformers model's body): no backward range
            warnings.filterwarnings("ignore", message="For backward hooks to be called, module output")
            yield sorted(set(names))
    finally:
        for h in handles:
            h.remove()
        while _open_ranges():
            _open_ranges().pop()[1].close()
