"""Variants of a data-parallel step compared in alternating rounds (`trainperf ddp --rounds N`).

The cases of one process group run round after round, every variant once a round (A, B, C, A, B,
C, ...), so drift of clocks, power and the host hits every variant alike. Per setup (a variant with
its bucket size, ZeRO-1, link, compile and gradients' dtype on the wire, on one model, batch shape
and world size), the step is the median over its rounds with a 95% confidence interval; a
variant's lead over the reference variant of the same pairing (everything but the variant and its
bucket size) is taken round by round (the two were measured side by side) and stated only where
its interval clears zero.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pandas as pd

from trainperf.core.stats import t_quantile_975

SETUP = ["variant", "bucket_mb", "shard_optimizer", "link", "compile", "reduce_dtype", "model", "batch",
         "seq", "world_size"]
PAIRING = SETUP[2:]  # what a lead compares within


def _interval(values: list[float]) -> float:
    """Half-width of the 95% confidence interval of the mean of `values` (NaN for one value)."""
    n = len(values)
    return t_quantile_975(n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else math.nan


def _lead(ref: dict[int, float], mine: dict[int, float]) -> tuple[float, float, str]:
    """Mean paired ratio ref/mine over the rounds both ran, its interval, and the statement."""
    ratios = [ref[r] / mine[r] for r in sorted(set(ref) & set(mine))]
    if not ratios:
        return math.nan, math.nan, "no paired rounds"
    mean, half = statistics.fmean(ratios), _interval(ratios)
    if math.isnan(half) or mean - half <= 1 <= mean + half:
        return mean, half, "no lead established"
    return mean, half, f"{mean:.3f}x {'faster' if mean > 1 else 'slower'} (±{half:.3f})"


def rounds_table(records: list, reference: str = "naive") -> pd.DataFrame:
    """One row per setup: its rounds, median and mean step (ms) with the 95% interval, the share of
    its NCCL time hidden (median over rounds), and its lead over `reference` of the same pairing."""
    ok = [r for r in records if r.status == "ok"]
    steps: dict[tuple, dict[int, float]] = {}
    hidden: dict[tuple, list[float]] = {}
    for r in ok:
        key = tuple(r.spec.get(k) for k in SETUP)
        steps.setdefault(key, {})[r.spec.get("round", 1)] = r.metrics["step_ms_median"]
        if r.metrics.get("hidden_share") is not None:
            hidden.setdefault(key, []).append(r.metrics["hidden_share"])
    rows: list[dict[str, Any]] = []
    for key, by_round in steps.items():
        setup = dict(zip(SETUP, key, strict=True))
        refs = [k for k in steps if k[0] == reference and all(
            dict(zip(SETUP, k, strict=True))[p] == setup[p] for p in PAIRING)]
        values = list(by_round.values())
        lead = _lead(steps[refs[0]], by_round) if refs and key[0] != reference else (math.nan, math.nan, "")
        rows.append({**setup, "rounds": len(values), "step_ms_median": statistics.median(values),
                     "step_ms_mean": statistics.fmean(values), "step_ms_ci95": _interval(values),
                     "hidden_share": statistics.median(hidden[key]) if key in hidden else None,
                     f"vs_{reference}": lead[0], f"vs_{reference}_ci95": lead[1], "lead": lead[2]})
    return pd.DataFrame(rows)
