"""Loss parity of training recipes (`trainperf parity`): a speed-up counts only for a recipe that
trains the same. From the same initial weights and the same batches, each recipe takes N AdamW
steps on a language the model can learn; its loss curve is set beside stock's.

The language: a fixed random Markov chain over the first 512 token ids, each token followed by
one of four successors with fixed probabilities, so the loss falls from ln(vocab) towards the
chain's entropy (about 1 nat) within a few hundred steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from trainperf.core.errors import SpecError
from trainperf.core.spec import check_choice, check_positive
from trainperf.workloads.llama_sdpa import (
    RECIPES,
    LlamaSpec,
    LlamaStep,
    choose_kv_mode,
    recipe_setup,
    setup_spec,
)
from trainperf.workloads.llama_sdpa import validate as validate_llama

LANGUAGE_TOKENS = 512
SUCCESSORS = 4
TOLERANCE = 0.03  # largest relative deviation from stock's (smoothed) loss that still counts as parity
SMOOTH = 5  # steps in the rolling mean the deviation is taken on


@dataclass(frozen=True)
class ParitySpec:
    recipe: str
    model: str
    batch: int
    seq: int
    train_steps: int
    lr: float
    dtype: str
    sdpa_backend: str
    device: str
    layers: int | None = None

    def label(self) -> str:
        return f"{self.recipe} {self.train_steps} steps {self.batch}x{self.seq} lr={self.lr:g}"

    def llama_spec(self) -> LlamaSpec:
        return setup_spec(recipe_setup(self.recipe, self.device), self.sdpa_backend, batch=self.batch,
                         seq=self.seq, dtype=self.dtype, optimizer="none", inputs="ids", model=self.model,
                         layers=self.layers, device=self.device)


def validate(spec: ParitySpec) -> None:
    check_choice("recipe", spec.recipe, RECIPES)
    check_positive(spec, "train_steps")
    if not (math.isfinite(spec.lr) and spec.lr > 0):
        raise SpecError(f"--lr must be a positive number, got {spec.lr}")
    validate_llama(spec.llama_spec())


def markov_batches(vocab: int, batch: int, seq: int, steps: int, seed: int = 0) -> list[torch.Tensor]:
    """`steps` batches of [batch, seq + 1] token ids from the fixed chain (the same for every
    recipe: a CPU generator seeded alike)."""
    g = torch.Generator().manual_seed(seed)
    n = min(LANGUAGE_TOKENS, vocab)
    successors = torch.stack([torch.randperm(n, generator=g)[:SUCCESSORS] for _ in range(n)])
    probs = torch.rand(n, SUCCESSORS, generator=g).add(0.2).softmax(-1)
    tokens = torch.empty(steps * batch, seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, n, (steps * batch,), generator=g)
    for t in range(seq):  # every sequence of every batch at once, one position at a time
        pick = torch.multinomial(probs[tokens[:, t]], 1, generator=g).squeeze(1)
        tokens[:, t + 1] = successors[tokens[:, t], pick]
    return list(tokens.split(batch))


def measure_parity(spec: ParitySpec) -> dict[str, Any]:
    """Train `spec.train_steps` AdamW steps; the loss of every step, as a comma-joined string."""
    device = torch.device(spec.device)
    step = LlamaStep(spec.llama_spec(), device)
    try:
        choose_kv_mode(step, spec.sdpa_backend)  # one forward + backward, no optimizer yet
        step.opt = torch.optim.AdamW(step.model.parameters(), lr=spec.lr, weight_decay=0.0)
        mask = torch.ones(spec.batch, spec.seq, dtype=torch.long, device=device)
        losses = []
        for tokens in markov_batches(step.cfg.vocab_size, spec.batch, spec.seq, spec.train_steps):
            tokens = tokens.to(device)
            step.inputs = {"input_ids": tokens[:, :-1], "attention_mask": mask}
            step.targets = tokens[:, 1:].contiguous()
            losses.append(step().detach())
        curve = torch.stack(losses).float().cpu().tolist()
    finally:
        step.close()
    return {"loss_first": curve[0], "loss_last": curve[-1], "loss_curve": ",".join(f"{x:.8g}" for x in curve),
            "swaps": ",".join(step.swaps) or "none"}


def curves(records: list) -> pd.DataFrame:
    """Step x recipe losses of the finished records."""
    return pd.DataFrame({r.spec["recipe"]: [float(x) for x in r.metrics["loss_curve"].split(",")]
                         for r in records if r.status == "ok"}).rename_axis("step")


def parity_table(losses: pd.DataFrame, reference: str = "stock") -> pd.DataFrame:
    """Per recipe (a column of `losses`): first and last loss, the largest relative deviation of its
    smoothed curve from the reference's (`parity` says whether it stays within TOLERANCE), and the
    mean deviation over the last fifth of the steps (whether it ends where the reference does)."""
    smooth = losses.rolling(SMOOTH, min_periods=1).mean()
    tail = max(len(losses) // 5, 1)
    rows = []
    for recipe in losses:
        dev = end = None
        if reference in smooth and recipe != reference:
            rel = (smooth[recipe] - smooth[reference]).abs() / smooth[reference]
            dev, end = float(rel.max()), float(rel.iloc[-tail:].mean())
        first, last = losses[recipe].iloc[0], losses[recipe].iloc[-1]
        rows.append({"recipe": recipe, "loss_first": first, "loss_last": last, "max_rel_dev": dev,
                     "final_rel_dev": end,
                     "parity": "reference" if recipe == reference else
                     ("no reference" if dev is None else ("ok" if dev <= TOLERANCE else "FLAGGED"))})
    return pd.DataFrame(rows)
