"""Summary statistics for repeated timings: centre, spread, confidence and noise flags."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom; beyond that the normal 1.96.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

HIGH_CV = 0.05  # coefficient of variation above which a measurement is flagged as noisy


def t_quantile_975(dof: int) -> float:
    """The 97.5% Student-t quantile, so mean ± t·sem is a 95% confidence interval."""
    if dof < 1:
        return float("nan")
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Mean, std, median, IQR, min/max, 95% CI half-width and CV of a non-empty sample."""
    if not samples:
        raise ValueError("summarize() needs at least one sample")
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    mean = statistics.fmean(xs)
    std = statistics.stdev(xs) if n > 1 else 0.0
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if n > 1 else (xs[0],) * 3
    ci95 = t_quantile_975(n - 1) * std / math.sqrt(n) if n > 1 else float("nan")
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "median": statistics.median(xs),
        "iqr": q3 - q1,
        "min": xs[0],
        "max": xs[-1],
        "ci95": ci95,
        "cv": std / mean if mean else float("nan"),
    }


def ratio_se(num: Sequence[float], den: Sequence[float]) -> float:
    """Standard error of mean(num) / mean(den) from two timings given as (mean, std, n), by the
    delta method with the samples taken as independent: how far a speed-up of two measured means
    is known. NaN where either has fewer than two samples."""
    (m1, s1, n1), (m2, s2, n2) = num, den
    if not (n1 >= 2 and n2 >= 2 and m1 and m2):
        return float("nan")
    return m1 / m2 * math.sqrt((s1 / m1) ** 2 / n1 + (s2 / m2) ** 2 / n2)


def is_noisy(summary: dict[str, float], threshold: float = HIGH_CV) -> bool:
    """True when the spread is large enough that the median deserves a second look."""
    return summary["cv"] > threshold
