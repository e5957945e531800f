"""Precision and compiler modes shared by workloads: autocast, grad scaler, regional compilation,
validation per device."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable
from typing import Any

import torch

from trainperf.core.errors import SpecError
from trainperf.core.spec import check_choice

PRECISIONS = ("fp32", "bf16", "fp16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Autocast to bf16/fp16, or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """A loss scaler, active only for fp16 (bf16 and fp32 need none)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def check_autocast_dtype(dtype: str, device: torch.device) -> None:
    """SpecError when `dtype` is unknown or this device cannot autocast to it."""
    check_choice("dtype", dtype, PRECISIONS)
    if device.type == "cuda" and dtype == "bf16" and not torch.cuda.is_bf16_supported():
        raise SpecError(f"--dtype 'bf16' is not supported by {torch.cuda.get_device_name(device)}"
                        "; valid choices here: fp32, fp16")
    if device.type == "cpu" and dtype == "fp16":
        raise SpecError("--dtype 'fp16' (autocast + grad scaler) needs a CUDA GPU; "
                        "valid choices on the CPU: fp32, bf16")


def check_compiler(device: torch.device) -> None:
    """SpecError when torch.compile cannot generate code for this device."""
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            raise SpecError("--compile on needs Triton for CUDA, which is not installed; "
                            "valid choices here: off") from None
    elif not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        raise SpecError("--compile on needs a C++ compiler on the CPU (none found on PATH); "
                        "valid choices here: off")


def compile_regions(modules: Iterable[torch.nn.Module], options: dict[str, Any] | None = None) -> None:
    """torch.compile each module in place ("regional" compilation: a model's repeated blocks).

    Identical blocks share one compiled graph, so compile time no longer grows with depth
    (minutes → seconds for a 48-layer model) at the cost of fusions across block borders; code
    outside the blocks (masks, embeddings, the loss) stays eager. Within one process later cases
    reuse compiled code, and torch.compile's default automatic dynamic shapes turn a dimension
    that changed symbolic (`allow_recompiles` keeps a long sweep compiled). `options` are
    Inductor settings for these modules' code only.
    """
    allow_recompiles()
    for module in modules:
        module.compile(options=options)


def allow_recompiles(limit: int = 256) -> None:
    """Let Dynamo compile a function for up to `limit` shapes, and fail rather than fall back.

    Dynamo keeps compiled code per Python function, and past its recompile limit (8 by default)
    it runs the function eagerly from then on without a word, so a sweep over shapes would time
    eager code under a "compiled" label. The limit is raised to `limit`, and where torch has the
    switch, reaching it raises an error (a recorded error row) instead.
    """
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), limit))
    for name in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, True)
