"""A training step of any causal LM: a transformers config, or the user's own nn.Module.

The step the GPT LM presets take (workloads/step.py), for a model trainperf did not write: token
ids in, logits out (models/source.py), cross-entropy against the next tokens, backward, AdamW.
Compile acts on the model's repeated blocks, found by themselves or named (`blocks`); a model
where none is found compiles whole, and the record says so. FLOPs are counted once per case with
PyTorch's flop counter, on one eager step before the timed ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainperf.core.errors import SpecError
from trainperf.core.flops import counted_flops
from trainperf.core.spec import check_choice, check_non_negative, check_positive
from trainperf.models.lm import lm_loss
from trainperf.models.peers import ANY_MODEL_RECIPES, Applied, apply_recipe
from trainperf.models.source import Blocks, ModelSource, find_blocks, is_model_source, logits_of, vocab_of
from trainperf.workloads.precision import autocast, check_autocast_dtype, compile_regions, grad_scaler
from trainperf.workloads.step import MODES, Phase, no_phase, timed_steps

Batch = Callable[[], tuple[torch.Tensor, torch.Tensor]]  # token ids and their targets
MakeOptimizer = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


@dataclass(frozen=True)
class ModelStepSpec:
    """One case of a model's step. `model` names it (models/source.py); a model handed over as an
    object (the Python API) is named by its class."""

    model: str
    seq: int
    batch: int
    dtype: str  # autocast's, over fp32 weights
    compile: bool
    mode: str
    device: str
    blocks: str | None = None  # the repeated blocks' module path, where not found by themselves
    recipe: str = "stock"  # models/peers.ANY_MODEL_RECIPES, applied after the FLOPs are counted
    warmup: int = 5
    iters: int = 10

    def label(self) -> str:
        recipe = f" {self.recipe}" if self.recipe != "stock" else ""
        return (f"{self.model} seq={self.seq} batch={self.batch} {self.dtype}"
                f"{' compiled' if self.compile else ''}{recipe} {self.mode}")


def validate(spec: ModelStepSpec) -> None:
    """SpecError for a case that cannot run: bad numbers, or a model name that gives no model."""
    check_positive(spec, "seq", "batch", "iters")
    check_non_negative(spec, "warmup")
    check_choice("mode", spec.mode, MODES)
    check_choice("recipe", spec.recipe, ANY_MODEL_RECIPES)
    check_autocast_dtype(spec.dtype, torch.device(spec.device))
    if is_model_source(spec.model):  # not a model handed over as an object
        ModelSource(spec.model).check()


class ModelStepCase:
    """A model, its optimizer and a batch, and one step split into named phases (the interface of
    workloads/step.py's StepCase, so profiles and memory reports take either)."""

    def __init__(self, spec: ModelStepSpec, model: nn.Module | None = None, batch: Batch | None = None,
                 optimizer: MakeOptimizer | None = None) -> None:
        self.spec = spec
        self.device = device = torch.device(spec.device)
        torch.manual_seed(0)
        self.model = (model if model is not None else ModelSource(spec.model).build(device)).train()
        self.vocab = vocab_of(self.model)
        self.blocks: Blocks | None = find_blocks(self.model, spec.blocks)
        params = [p for p in self.model.parameters() if p.requires_grad]
        make = optimizer or (lambda ps: torch.optim.AdamW(ps, lr=1e-4, fused=device.type == "cuda"))
        self.opt = make(params) if spec.mode == "train" else None
        self.scaler = grad_scaler(device, spec.dtype)
        self.batch = batch or self._random_batch
        self.x, self.y = self.batch()
        if self.x.shape != (spec.batch, spec.seq):
            raise SpecError(f"the batch is {tuple(self.x.shape)}, not (batch, seq) = "
                            f"({spec.batch}, {spec.seq})")
        self.recipe = Applied(lambda: None)  # stock while the FLOPs are counted
        self.flops = counted_flops(lambda: self.run(optimizer=False))  # eager: compile hides operators
        # after the count: the recipe's kernels do the same math, but the counter cannot see into them
        self.recipe = apply_recipe(self.model, spec.recipe, compiled=spec.compile)
        self.undo = self.recipe.undo
        if spec.compile:
            compile_regions(list(self.blocks.layers) if self.blocks else [self.model])

    def _random_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, self.vocab, (self.spec.batch, self.spec.seq + 1), device=self.device)
        return tokens[:, :-1], tokens[:, 1:]

    def run(self, phase: Phase = no_phase, until: str | None = None, optimizer: bool = True) -> torch.Tensor:
        """One step; `phase(name)` wraps forward, backward and optimizer (timers, ranges).
        `until="forward"` stops after the forward (its activations kept for backward)."""
        spec = self.spec
        grad = torch.no_grad if spec.mode == "forward" else torch.enable_grad
        with phase("forward"), grad(), autocast(self.device, spec.dtype):
            if self.recipe.loss is None:
                loss = lm_loss(logits_of(self.model, self.x).float(), self.y)
            else:  # the recipe's, from the hidden states: no whole logits
                loss = self.recipe.loss(self.x, self.y)
        if until == "forward":
            return loss
        if spec.mode != "forward":
            with phase("backward"):
                self.scaler.scale(loss).backward()
        if self.opt is not None and optimizer:
            with phase("optimizer"):
                self.scaler.step(self.opt)
                self.scaler.update()
        if spec.mode != "forward":
            (self.opt or self.model).zero_grad(set_to_none=True)
        return loss

    def describe_blocks(self) -> str:
        return self.blocks.describe() if self.blocks else "none found: compiled and profiled whole"

    def blocks_path(self) -> str | None:
        return self.blocks.path if self.blocks else None


def measure_model_step(spec: ModelStepSpec, peak_override: float | None = None,
                       **given: Any) -> dict[str, Any]:
    """Time the step of `spec` (`given`: a model object, a batch function, an optimizer factory,
    as ModelStepCase takes them); MFU from the counted FLOPs."""
    t0 = time.perf_counter()
    case = ModelStepCase(spec, **given)
    try:
        metrics = timed_steps(case, spec, t0, case.flops, "counted", peak_override)
    finally:
        case.undo()
    metrics["blocks_found"] = case.describe_blocks()
    if case.recipe.swaps:
        metrics["swaps"] = case.recipe.swaps
    return metrics
