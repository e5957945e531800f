"""Loss parity of training recipes (`trainperf parity`): a speed-up counts only for a recipe that
trains the same. From the same initial weights and the same batches, each recipe takes N AdamW
steps on a language the model can learn; its loss curve is set beside stock's.

Each run is judged against stock's own noise: stock's runs from other seeds make a band per step,
and a run is within it or outside it from a step on (parity_band.py). Kernels that are not
deterministic (atomics in a backward, a float8 scale that lands on the other side of a power of
two) make a recipe's curve differ from run to run, so `--repeats N` trains every recipe N times,
each run beside stock's run of the same number. Repeats make the same draw of the task again;
`--draws N` trains every recipe on N draws of the task (another language and its batches each),
beside stock's runs of the same draw.

A transformers Llama (a preset, config or hub id) trains with the Llama recipes of `llama`
(workloads/llama_sdpa.RECIPES) on its weights' dtype. Any other model (another family's config,
or `py:` an nn.Module of the user's) trains as `step` trains it (workloads/model_step.py: fp32
weights, autocast to the dtype) with the recipes any model takes: stock, compile (its blocks
compiled), liger, float8 and trainperf (models/peers.py).

The language: a fixed random Markov chain over the first 512 token ids, each token followed by
one of four successors with fixed probabilities, so the loss falls from ln(vocab) towards the
chain's entropy (about 1 nat) within a few hundred steps.

The optimizer (`--optimizer`) is AdamW set as language models are pretrained (`adamw-pretrain`,
the default: Llama's betas (0.9, 0.95), the gradients clipped to norm 1, the learning rate warmed
up over the first tenth of the steps), or with torch's defaults (`adamw`: betas (0.9, 0.999), no
clipping, no warm-up). With torch's defaults, the full-depth 1B model on an H100 sits on the
unigram plateau (about 6 nats) and leaves it with loss spikes. When it leaves varies from seed to
seed: 100 to more than 300 steps. So stock's seeds disagree with one another and its band decides
nothing (benchmarks/results/parity/h100-2026-11-27). With `adamw-pretrain` every seed learns the
task and the band decides (benchmarks/results/parity/h100-2026-11-28).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from trainperf.core.errors import SpecError
from trainperf.core.spec import check_choice, check_positive
from trainperf.models.peers import ANY_MODEL_RECIPES
from trainperf.models.source import ModelSource, vocab_of
from trainperf.workloads.llama_sdpa import (
    RECIPES,
    LlamaSpec,
    LlamaStep,
    choose_kv_mode,
    recipe_setup,
    setup_spec,
)
from trainperf.workloads.llama_sdpa import validate as validate_llama
from trainperf.workloads.model_step import ModelStepCase, ModelStepSpec
from trainperf.workloads.model_step import validate as validate_model_step

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LANGUAGE_TOKENS = 512
SUCCESSORS = 4
OPTIMIZERS = ("adamw-pretrain", "adamw")
SMOOTH = 5  # steps in the rolling mean the deviation is taken on
# the recipes of a model other than a transformers Llama (module doc)
ANY_MODEL_PARITY_RECIPES = ("stock", "compile", *(r for r in ANY_MODEL_RECIPES if r != "stock"))


@functools.lru_cache(maxsize=16)
def is_llama(model: str) -> bool:
    """Whether `model` names a transformers Llama, which trains with the Llama recipes; a name that
    gives no model counts as one, for the Llama path's validation to say what is wrong."""
    if model.startswith("py:"):
        return False
    try:
        return getattr(ModelSource(model).config(), "model_type", "llama") == "llama"
    except SpecError:
        return True


def recipes_of(model: str) -> tuple[str, ...]:
    """The recipes parity trains `model` with."""
    return tuple(RECIPES) if is_llama(model) else ANY_MODEL_PARITY_RECIPES


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
    run: int = 1  # which of the runs (the `--repeats` of each draw, draw after draw)
    draw: int = 1  # which draw of the task: the language and batches from seed draw - 1
    seed: int = 0  # another initialisation of the weights and order of the batches (stock's band)
    optimizer: str = "adamw-pretrain"  # OPTIMIZERS

    def label(self) -> str:
        again = f" #{self.run}" if self.run > 1 else ""
        seeded = f" seed {self.seed}" if self.seed else ""
        return f"{self.recipe} {self.train_steps} steps {self.batch}x{self.seq} lr={self.lr:g}{again}{seeded}"

    def model_step_spec(self) -> ModelStepSpec:
        """The step of a model other than a Llama (module doc); compile is a recipe of its own."""
        return ModelStepSpec(self.model, seq=self.seq, batch=self.batch, dtype=self.dtype,
                             compile=self.recipe == "compile", mode="train", device=self.device,
                             recipe="stock" if self.recipe == "compile" else self.recipe)

    def llama_spec(self) -> LlamaSpec:
        setup = recipe_setup(self.recipe, self.device, replayed=False, seq=self.seq)  # new batches
        return setup_spec(setup, self.sdpa_backend, batch=self.batch, seq=self.seq, dtype=self.dtype,
                          optimizer="none", inputs="ids", model=self.model, layers=self.layers,
                          device=self.device)


def validate(spec: ParitySpec) -> None:
    check_choice("optimizer", spec.optimizer, OPTIMIZERS)
    check_positive(spec, "train_steps")
    if not (math.isfinite(spec.lr) and spec.lr > 0):
        raise SpecError(f"--lr must be a positive number, got {spec.lr}")
    if is_llama(spec.model):
        check_choice("recipe", spec.recipe, RECIPES)
        validate_llama(spec.llama_spec())
        return
    check_choice("recipe", spec.recipe, ANY_MODEL_PARITY_RECIPES)
    ModelSource(spec.model, spec.layers).check()
    validate_model_step(spec.model_step_spec())


def markov_batches(vocab: int, batch: int, seq: int, steps: int, seed: int = 0,
                   order: int = 0) -> list[torch.Tensor]:
    """`steps` batches of [batch, seq + 1] token ids from the chain of draw `seed` (the same for
    every recipe: a CPU generator seeded alike); `order` > 0 samples other batches of the same
    chain."""
    g = torch.Generator().manual_seed(seed)
    n = min(LANGUAGE_TOKENS, vocab)
    successors = torch.stack([torch.randperm(n, generator=g)[:SUCCESSORS] for _ in range(n)])
    probs = torch.rand(n, SUCCESSORS, generator=g).add(0.2).softmax(-1)
    if order:
        g = torch.Generator().manual_seed(1_000_003 * order + seed)
    tokens = torch.empty(steps * batch, seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, n, (steps * batch,), generator=g)
    for t in range(seq):  # every sequence of every batch at once, one position at a time
        pick = torch.multinomial(probs[tokens[:, t]], 1, generator=g).squeeze(1)
        tokens[:, t + 1] = successors[tokens[:, t], pick]
    return list(tokens.split(batch))


class PretrainAdamW:
    """AdamW with Llama's pretraining settings: betas (0.9, 0.95), gradients clipped to norm 1, and
    the learning rate warmed up linearly over the first tenth of `steps`. It has the one method a
    training step calls."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, steps: int) -> None:
        self.params = list(params)
        self.adamw = torch.optim.AdamW(self.params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
        warmup = max(steps // 10, 1)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.adamw, lambda i: min(1.0, (i + 1) / warmup))

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # what a GradScaler unscales (fp16)
        return self.adamw.param_groups

    def step(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.adamw.step()
        self.schedule.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.adamw.zero_grad(set_to_none=set_to_none)


def make_optimizer(spec: ParitySpec, params: Iterable[torch.nn.Parameter]) -> Any:  # noqa: ANN401
    """The run's optimizer, as `spec.optimizer` names it."""
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=spec.lr, weight_decay=0.0)
    return PretrainAdamW(params, spec.lr, spec.train_steps)


def measure_parity(spec: ParitySpec) -> dict[str, Any]:
    """Train `spec.train_steps` optimizer steps; the loss of every step, as a comma-joined string."""
    if not is_llama(spec.model):
        return _train_any_model(spec)
    device = torch.device(spec.device)
    llama = spec.llama_spec()
    step = LlamaStep(llama, device, seed=spec.seed)
    try:
        # the recipe's attention (FA4 for some) and K/V heads; one forward + backward, no optimizer yet
        choose_kv_mode(step, llama.sdpa_backend, llama.kv_heads)
        step.opt = make_optimizer(spec, step.model.parameters())
        mask = torch.ones(spec.batch, spec.seq, dtype=torch.long, device=device)
        losses = []
        for tokens in markov_batches(step.cfg.vocab_size, spec.batch, spec.seq, spec.train_steps,
                                     seed=spec.draw - 1, order=spec.seed):
            tokens = tokens.to(device)
            step.inputs = {"input_ids": tokens[:, :-1], "attention_mask": mask}
            step.targets = tokens[:, 1:].contiguous()
            losses.append(step().detach())
        curve = torch.stack(losses).float().cpu().tolist()
    finally:
        step.close()
    return _curve_metrics(curve, ",".join(step.swaps) or "none")


def _curve_metrics(curve: list[float], swaps: str) -> dict[str, Any]:
    return {"loss_first": curve[0], "loss_last": curve[-1], "loss_curve": ",".join(f"{x:.8g}" for x in curve),
            "swaps": swaps}


def _train_any_model(spec: ParitySpec) -> dict[str, Any]:
    """measure_parity for a model other than a Llama: `step`'s training step (module doc), the
    weights drawn from `spec.seed`."""
    device = torch.device(spec.device)
    torch.manual_seed(spec.seed)
    model = ModelSource(spec.model, spec.layers).build(device)
    batches = [t.to(device) for t in markov_batches(vocab_of(model), spec.batch, spec.seq, spec.train_steps,
                                                    seed=spec.draw - 1, order=spec.seed)]

    def pair(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return tokens[:, :-1], tokens[:, 1:].contiguous()

    case = ModelStepCase(spec.model_step_spec(), model=model, batch=lambda: pair(batches[0]),
                         optimizer=lambda params: make_optimizer(spec, params))
    try:
        losses = []
        for tokens in batches:
            case.x, case.y = pair(tokens)
            losses.append(case.run().detach())
        curve = torch.stack(losses).float().cpu().tolist()
    finally:
        case.undo()
    return _curve_metrics(curve, spec.recipe)


def column(recipe: str, run: int) -> str:
    """The loss column of one run of a recipe: its name for the first run, "NAME #N" after."""
    return recipe if run == 1 else f"{recipe} #{run}"


def _recipe_and_run(name: str) -> tuple[str, int]:
    recipe, _, run = name.partition(" #")
    return recipe, int(run or 1)


def curves(records: list) -> pd.DataFrame:
    """Step x run-of-a-recipe losses of the finished records (columns named by `column`), stock's
    runs of other seeds (its band, parity_band.py) aside; its attrs["first_runs"] maps each run to
    the first run of its draw."""
    done = [r for r in records if r.status == "ok" and not r.spec.get("seed", 0)]
    losses = pd.DataFrame({column(r.spec["recipe"], r.spec.get("run", 1)):
                           [float(x) for x in r.metrics["loss_curve"].split(",")]
                           for r in done}).rename_axis("step")
    losses.attrs["first_runs"] = first_runs({r.spec.get("run", 1): r.spec.get("draw", 1) for r in done})
    return losses


def first_runs(draw_of_run: dict[int, int]) -> dict[int, int]:
    """Each run's first run of the same draw, from the draw of each run."""
    return {run: min(n for n, d in draw_of_run.items() if d == draw) for run, draw in draw_of_run.items()}


def _deviation(smooth: pd.DataFrame, name: str, reference: str, tail: int) -> tuple[float, float] | None:
    """The largest relative deviation of one smoothed curve from another's, and its mean over the
    last `tail` steps; None without the reference."""
    if reference not in smooth:
        return None
    rel = relative_deviation(smooth, name, reference)
    return float(rel.max()), float(rel.iloc[-tail:].mean())


def smoothed(losses: pd.DataFrame) -> pd.DataFrame:
    """Each curve's running mean over SMOOTH steps: what the table and the plot compare."""
    return losses.rolling(SMOOTH, min_periods=1).mean()


def relative_deviation(smooth: pd.DataFrame, name: str, reference: str) -> pd.Series:
    """Per step, how far one smoothed curve is from the reference's, relative to the reference's."""
    return (smooth[name] - smooth[reference]).abs() / smooth[reference]


def _reference_of(name: str, reference: str, first_runs: dict[int, int]) -> str:
    """The reference column a loss column is compared with: the reference's run of the same number
    (the reference's own later runs, with its first of the same draw)."""
    recipe, run = _recipe_and_run(name)
    return column(reference, first_runs.get(run, 1) if recipe == reference else run)


def plot_parity(losses: pd.DataFrame, path: Path, reference: str = "stock") -> Figure:
    """Two panels: every run's loss curve, and its smoothed deviation from the reference's run of
    the same number; one colour per recipe, its runs all in it (the reference's later runs show
    its own spread)."""
    from trainperf.core.plots import pyplot

    plt = pyplot()
    smooth = smoothed(losses)
    recipes = list(dict.fromkeys(_recipe_and_run(name)[0] for name in losses))
    palette = plt.get_cmap("tab10" if len(recipes) <= 10 else "tab20").colors
    colours = dict(zip(recipes, palette, strict=False))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name in losses:
        recipe, run = _recipe_and_run(name)
        left.plot(losses.index, losses[name], color=colours[recipe], lw=1.2, alpha=0.8,
                  label=recipe if run == 1 else None)
        ref = _reference_of(name, reference, losses.attrs.get("first_runs", {}))
        if ref in smooth and ref != name:
            right.plot(smooth.index, 100 * relative_deviation(smooth, name, ref), color=colours[recipe],
                       lw=1.2, alpha=0.8)
    handles = [h for ax in (left, right) for h in ax.get_legend_handles_labels()[0]]
    left.set(yscale="log", xlabel="step", ylabel="training loss", title="every run's loss")
    right.set(xlabel="step", ylabel="% from the reference (smoothed)",
              title=f"deviation from {reference}'s run of the same number")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    right.legend(handles=handles, title="recipe", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle("loss from the same weights and batches")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig


def run_deviations(losses: pd.DataFrame, reference: str = "stock") -> pd.DataFrame:
    """One row per run compared with a reference run (every run of a recipe, the reference's
    later runs of a draw): its recipe, run, the largest relative deviation of its smoothed curve
    from the reference's run of the same number (or the draw's first, for the reference itself),
    and the mean deviation over the last fifth of the steps; NaN where that reference run is
    missing."""
    smooth = smoothed(losses)
    first = losses.attrs.get("first_runs", {})
    tail = max(len(losses) // 5, 1)
    rows = []
    for name in losses:
        recipe, run = _recipe_and_run(name)
        ref = _reference_of(name, reference, first)
        if ref != name:
            dev = _deviation(smooth, name, ref, tail) or (math.nan, math.nan)
            rows.append({"recipe": recipe, "run": run, "max_rel_dev": dev[0], "final_rel_dev": dev[1]})
    return pd.DataFrame(rows, columns=["recipe", "run", "max_rel_dev", "final_rel_dev"])


def parity_table(losses: pd.DataFrame, reference: str = "stock") -> pd.DataFrame:
    """Per recipe: first and last loss (of its first run), the largest relative deviation of its
    smoothed curve from the reference's run of the same number, worst over its runs, and the mean
    deviation over the last fifth of the steps (whether it ends where the reference does), worst
    over its runs; `draws` counts the draws of the task its runs trained on. The reference's own
    row, with several runs of a draw, holds their deviation from the draw's first: the spread that
    nondeterminism alone gives. These describe a curve; the verdict is stock's band's
    (parity_band.py), since a fixed threshold on them flags a recipe by where it met a spike."""
    devs = run_deviations(losses, reference).dropna()
    first = losses.attrs.get("first_runs", {})
    runs: dict[str, list[int]] = {}
    for name in losses:
        recipe, run = _recipe_and_run(name)
        runs.setdefault(recipe, []).append(run)
    rows = []
    for recipe, numbers in runs.items():
        found = devs[devs.recipe == recipe]
        curve = losses[column(recipe, min(numbers))]
        rows.append({"recipe": recipe, "runs": len(numbers),
                     "draws": len({first.get(n, 1) for n in numbers}),
                     "loss_first": curve.iloc[0], "loss_last": curve.iloc[-1],
                     "max_rel_dev": found.max_rel_dev.max() if len(found) else None,
                     "final_rel_dev": found.final_rel_dev.max() if len(found) else None})
    return pd.DataFrame(rows)


def deviation_text(row: pd.Series, reference: str = "stock") -> str:
    """A table row (named by its recipe) in a few words: "1.52%", "1.52% (worst of 3 runs)", and
    draws for runs each of its own draw ("worst of 4 draws", "worst of 8 runs of 4 draws");
    "reference" for the reference's one run, "no reference" where its run of that number is
    missing."""
    if pd.isna(row.max_rel_dev):
        return "reference" if row.name == reference else "no reference"
    runs, draws = int(row.runs), int(row.draws)
    if runs == 1:
        return f"{row.max_rel_dev:.2%}"
    counted = (f"{runs} runs" if draws == 1 else f"{draws} draws" if draws == runs
               else f"{runs} runs of {draws} draws")
    return f"{row.max_rel_dev:.2%} (worst of {counted})"
