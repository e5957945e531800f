"""trainperf from Python: measure or profile the training step of a model you already hold.

    import trainperf
    record = trainperf.measure_step(model, batch=(8, 1024), dtype="bf16", compile=True)
    record.metrics["step_ms_median"], record.metrics["mfu"]
    trainperf.to_frame([record])                      # the row the CLI's CSV would hold
    breakdown = trainperf.profile_step(model, batch=(8, 1024))
    breakdown.ranges                                  # time per module range, as `trainperf profile`

The step is the CLI's (workloads/model_step.py): token ids in, logits out (or an output with
`.logits`), cross-entropy against the next tokens, backward, the optimizer. The record is the one
`trainperf step` stores (workload `step`, the environment, `status`: a case that ran out of memory
or failed is a record saying so, not an exception), and goes into a results store with `db=`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainperf.core import env as envmod
from trainperf.core.errors import SpecError
from trainperf.core.record import Record
from trainperf.core.runner import measure_case
from trainperf.core.store import Store, to_frame
from trainperf.profiling.breakdown import Breakdown
from trainperf.workloads.model_step import (
    Batch,
    MakeOptimizer,
    ModelStepCase,
    ModelStepSpec,
    measure_model_step,
    validate,
)

OPTIMIZERS: dict[str, MakeOptimizer] = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-4),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-3),
}

__all__ = ["measure_step", "profile_step", "to_frame"]


def _spec_and_parts(model: nn.Module, batch: tuple[int, int] | Batch, optimizer: str | MakeOptimizer | None,
                    dtype: str | None, compile: bool, mode: str, warmup: int, iters: int,
                    blocks: str | None) -> tuple[ModelStepSpec, dict[str, Any]]:
    """The spec of the step the arguments describe, and what ModelStepCase takes beside it."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    if callable(batch):
        ids, _ = batch()
        shape, make_batch = tuple(ids.shape), batch
    elif isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(n, int) for n in batch):
        shape, make_batch = batch, None
    else:
        raise TypeError("batch must be (batch, seq) or a function returning (token ids, targets)")
    if isinstance(optimizer, str) and optimizer not in OPTIMIZERS:
        raise SpecError(f"optimizer {optimizer!r}; valid choices: {', '.join(OPTIMIZERS)}, or a function "
                        "of the parameters returning an optimizer")
    make_opt = OPTIMIZERS[optimizer] if isinstance(optimizer, str) else optimizer
    spec = ModelStepSpec(f"{type(model).__name__} (a Python object)", seq=shape[1], batch=shape[0],
                         dtype=dtype or ("bf16" if device.type == "cuda" else "fp32"), compile=compile,
                         mode=mode, device=str(device), blocks=blocks, warmup=warmup, iters=iters)
    validate(spec)
    return spec, {"model": model, "batch": make_batch, "optimizer": make_opt}


def measure_step(model: nn.Module, batch: tuple[int, int] | Batch = (4, 512), *,
                 optimizer: str | MakeOptimizer | None = "adamw", dtype: str | None = None,
                 compile: bool = False, mode: str = "train", warmup: int = 3, iters: int = 10,
                 blocks: str | None = None, peak_tflops: float | None = None,
                 db: str | Path | None = None) -> Record:
    """Time `iters` training steps of `model` (after `warmup`) on the device its parameters are on.

    batch: (batch, seq) of random token ids, or a function returning (token ids, targets).
    optimizer: "adamw", "sgd", or a function of the parameters returning an optimizer.
    dtype: autocast's, over the model's weights: fp32, bf16 or fp16 (default bf16 on a GPU).
    compile: torch.compile the repeated blocks (found, or `blocks`, a module path), else the model.
    db: a results store (SQLite) to append the record to, as `trainperf step --db` does.
    """
    spec, parts = _spec_and_parts(model, batch, optimizer, dtype, compile, mode, warmup, iters, blocks)
    env = envmod.capture(torch.device(spec.device))
    record = measure_case("step", spec, lambda s: measure_model_step(s, peak_tflops, **parts), env)
    if db is not None:
        Store(Path(db)).append(record)
    return record


def profile_step(model: nn.Module, batch: tuple[int, int] | Batch = (4, 512), *,
                 optimizer: str | MakeOptimizer | None = "adamw", dtype: str | None = None,
                 compile: bool = False, steps: int = 1, blocks: str | None = None) -> Breakdown:
    """One profiled training step of `model` (after two warm-up steps), per module range and
    kernel: `.ranges` and `.kernels` (DataFrames), as `trainperf profile` prints them."""
    from trainperf.profiling.session import profile_workload

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # the CPU build's profiler says nothing of itself
    spec, parts = _spec_and_parts(model, batch, optimizer, dtype, compile, "train", 0, steps, blocks)
    case = ModelStepCase(spec, **parts)
    return profile_workload(case.run, case.model, torch.device(spec.device), steps=steps,
                            blocks=case.blocks_path())

