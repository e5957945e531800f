"""Loss parity judged against stock's own noise: the band a recipe must stay inside is how far
stock moves from itself, not a constant.

Stock trains `--stock-seeds` N times on each draw of the task, each time from another
initialisation of the weights and another order of the batches of the same language (seed 0 is
the run every recipe shares its weights and batches with). Per step, on curves smoothed over SMOOTH
steps, the band is stock's mean m(t) and spread s(t) (the standard deviation over its N runs, never below the
resolution of the loss's number format); one
more stock run lands within m ± k·s with 95% probability, k = t(0.975, N−1)·sqrt(1 + 1/N) (the
prediction interval of one more draw from N). A recipe's run is judged against the band of its
draw:
  band_dev_max    the largest |R − m| / s over the run, in units of stock's spread
  band_dev_final  (R − m) / s averaged over the last fifth of the steps
  final_diff      R − m averaged over the last fifth: where the recipe ends against stock's mean,
  final_ci        ± k · s there: the interval one more stock run ends within
  left_at         the first step of a stretch of more than max(SMOOTH, steps/20) steps outside
                  m ± k·s (a blip, which smoothing spreads over SMOOTH steps, or a lag of a step
                  or two in a fast fall does not leave), None if none
and the verdict is "within stock's noise", or "outside it from step X" (where it left, or the
start of the last fifth if only its end is outside).

A band is a yardstick only where stock's runs are one population and the band is narrow.
Training can sit on a plateau for a number of steps that varies from seed to seed. A seed still on
it at the end makes the band wide enough to pass anything. So before any recipe is judged, the
draw's band is checked twice:
- With three or more seeds, each seed is judged against the band of the others.
- The band's half-width over the last fifth must be under half of what stock's mean learned over
  the run (its first smoothed loss minus its last). A wider band cannot tell stock from a run that
  learned half as much.
Where either check fails, the draw's verdicts read "undecided: stock's band decides nothing
(...)", with the reason. The numbers are still given.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from trainperf.core.stats import t_quantile_975
from trainperf.workloads.parity import SMOOTH, smoothed

MIN_SEEDS = 2  # a spread needs two runs


def prediction_factor(n: int) -> float:
    """k such that one more run lands within mean ± k·sd of n runs with 95% probability."""
    return t_quantile_975(n - 1) * math.sqrt(1 + 1 / n)


def _stretch_start(outside: pd.Series, length: int) -> int | None:
    """The first step of the first run of at least `length` consecutive True values."""
    count = 0
    for i, out in enumerate(outside.tolist()):
        count = count + 1 if out else 0
        if count >= length:
            return int(outside.index[i - length + 1])
    return None


# The unit roundoff of the number format the loss is computed in: two losses closer than this
# relative distance are one, so stock's spread is never taken as narrower (at the first steps every
# initialisation gives ln(vocab)).
RESOLUTION = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}


def judge(curve: pd.Series, band: pd.DataFrame, resolution: float = RESOLUTION["fp32"]) -> dict[str, Any]:
    """One run (a loss per step) against stock's runs of the same draw (one column each), whose
    losses are computed to relative `resolution`."""
    smooth = smoothed(pd.concat([band, curve.rename("_run")], axis=1))
    runs, r = smooth[band.columns], smooth["_run"]
    n = runs.shape[1]
    mean = runs.mean(axis=1)
    sd = runs.std(axis=1, ddof=1).clip(lower=resolution * mean.abs())
    k = prediction_factor(n)
    tail = max(len(r) // 5, 1)
    left_at = _stretch_start((r - mean).abs() > k * sd, max(SMOOTH + 1, len(r) // 20))
    final_diff = float((r - mean).iloc[-tail:].mean())
    final_ci = float(k * sd.iloc[-tail:].mean())
    outside = left_at is not None or abs(final_diff) > final_ci
    if outside and left_at is None:
        left_at = int(r.index[-tail])
    return {"seeds": n, "band_dev_max": float(((r - mean).abs() / sd).max()),
            "band_dev_final": float(((r - mean) / sd).iloc[-tail:].mean()),
            "final_diff": final_diff, "final_ci": final_ci, "left_at": left_at,
            "verdict": f"outside it from step {left_at}" if outside else "within stock's noise"}


def _draws(records: list):  # noqa: ANN202 - yields (draw, band, others, curves)
    """Per draw with MIN_SEEDS stock runs: its band (stock's first runs, one column per seed), the
    other finished runs of the draw, and every run's losses by record id."""
    done = [r for r in records if r.status == "ok"]
    curve = {id(r): pd.Series([float(x) for x in r.metrics["loss_curve"].split(",")]) for r in done}
    for draw in sorted({r.spec.get("draw", 1) for r in done}):
        of_draw = [r for r in done if r.spec.get("draw", 1) == draw]
        stock = [r for r in of_draw if r.spec["recipe"] == "stock"]
        first_run = min((r.spec.get("run", 1) for r in stock), default=None)
        members = [r for r in stock if r.spec.get("run", 1) == first_run]
        if len(members) >= MIN_SEEDS:
            band = pd.DataFrame({f"seed {r.spec.get('seed', 0)}": curve[id(r)] for r in members})
            yield draw, band, [r for r in of_draw if r not in members], curve


def _resolution(record) -> float:  # noqa: ANN001
    return RESOLUTION.get(record.spec.get("dtype"), RESOLUTION["fp32"])


def undecided_band(band: pd.DataFrame, resolution: float = RESOLUTION["fp32"]) -> str | None:
    """Why stock's band (one column per seed) decides nothing: one of stock's runs lies outside the
    band of the others ("seed 3 outside the others from step 120"; each needs MIN_SEEDS others), or
    the band's end is wider than half of what stock learned; None where it can judge."""
    if band.shape[1] > MIN_SEEDS:
        for name in band.columns:
            out = judge(band[name], band.drop(columns=name), resolution)
            if out["left_at"] is not None:
                return f"{name} outside the others from step {out['left_at']}"
    mean = smoothed(band).mean(axis=1)
    learned = float(mean.iloc[0] - mean.iloc[-max(len(mean) // 5, 1):].mean())
    half_width = judge(band.mean(axis=1), band, resolution)["final_ci"]
    if half_width >= learned / 2:
        return f"its end spans ± {half_width:.2f} of the {learned:.2f} stock learned"
    return None


def _undecided(band: pd.DataFrame, others: list) -> str | None:
    """undecided_band of a draw, at the resolution its runs' losses were computed to."""
    return undecided_band(band, _resolution(others[0]) if others else RESOLUTION["fp32"])


def band_table(records: list) -> pd.DataFrame:
    """Per run of a recipe (stock's own repeats of the same seed too), its judgement against stock's
    band of the same draw: recipe, run, draw and the fields of `judge`; the verdict is undecided
    where the band decides nothing (`undecided_band`). Empty where no draw has MIN_SEEDS stock runs."""
    rows = []
    for draw, band, others, curve in _draws(records):
        reason = _undecided(band, others)
        for r in others:
            row = {"recipe": r.spec["recipe"], "run": r.spec.get("run", 1), "draw": draw,
                   **judge(curve[id(r)], band, _resolution(r))}
            if reason:
                row["verdict"] = f"undecided: stock's band decides nothing ({reason})"
            rows.append(row)
    return pd.DataFrame(rows, columns=["recipe", "run", "draw", "seeds", "band_dev_max", "band_dev_final",
                                       "final_diff", "final_ci", "left_at", "verdict"])


def verdicts_first(judged: pd.DataFrame) -> pd.DataFrame:
    """band_table's rows for the console: what names the run, its short verdict ("within stock's
    noise", "outside it from step 40", "undecided"), the numbers, and why a verdict is undecided
    (`why`, a footnote), so that the verdict is the last column a narrow terminal loses."""
    parts = judged.verdict.str.partition(": ")
    short, why = parts[0], parts[2]
    numbers = [c for c in judged.columns if c not in ("recipe", "run", "draw", "verdict")]
    return judged[["recipe", "run", "draw"]].assign(verdict=short).join(judged[numbers]).assign(why=why)


def plot_band(records: list, path) -> bool:  # noqa: ANN001 - a path
    """One panel per draw: stock's band (its mean ± k·s, smoothed) and every other run's smoothed
    loss over it, a dotted line where a run left the band, and in the title why a band decides
    nothing; False when no draw has a band."""
    from trainperf.core.plots import pyplot

    draws = list(_draws(records))
    if not draws:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(1, len(draws), figsize=(6.5 * len(draws), 4.5), squeeze=False)
    colours = dict(zip(dict.fromkeys(r.spec["recipe"] for *_, others, _ in draws for r in others),
                       plt.get_cmap("tab10").colors, strict=False))
    for ax, (draw, band, others, curve) in zip(axes[0], draws, strict=True):
        smooth = smoothed(band)
        mean = smooth.mean(axis=1)
        half = prediction_factor(band.shape[1]) * smooth.std(axis=1, ddof=1)
        ax.fill_between(mean.index, mean - half, mean + half, color="0.8",
                        label=f"stock's band ({band.shape[1]} seeds)")
        ax.plot(mean.index, mean, color="black", lw=1, label="stock's mean")
        for r in others:
            name = r.spec["recipe"] + (f" #{r.spec.get('run', 1)}" if r.spec.get("run", 1) > 1 else "")
            ax.plot(mean.index, smoothed(curve[id(r)].to_frame())[0], color=colours[r.spec["recipe"]], lw=1.2,
                    label=name)
            left = judge(curve[id(r)], band, _resolution(r))["left_at"]
            if left is not None:
                ax.axvline(left, color=colours[r.spec["recipe"]], ls=":", lw=1)
        reason = _undecided(band, others)
        title = f"draw {draw}" + (f"\nundecided: {reason}" if reason else "")
        ax.set(yscale="log", xlabel="step", ylabel="training loss (smoothed)", title=title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("each run against stock's own noise (dotted: where a run left the band)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
