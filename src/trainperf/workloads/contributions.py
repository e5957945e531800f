"""What each choice of the fastest case contributed: per setting, the same case with only that
setting changed, measured in the same run (`shard` writes it as shard_contributions.csv).

Each row sets one alternative against the fastest case of its shape (model, GPUs, tokens): how much
slower the step is with it, or its status where it did not run (an oom says the choice cannot fit).
Settings are compared one at a time from the fastest case, so a row needs the run to hold that
exact neighbour; a setting whose neighbours were not run has no row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

SHAPE = ["model", "world_size", "batch", "seq"]
# the columns that name a row of the table; its answer is slower_by (then the two times and the status)
CONTRIBUTION_CASE = [*SHAPE, "setting", "fastest", "instead"]
SETTINGS = ["shard", "checkpoint", "compile", "attention", "loss", "float8", "optimizer", "dtype", "prefetch",
            "reshard_after_forward", "offload"]


def contributions(df: pd.DataFrame, settings: Sequence[str] = SETTINGS,
                  shape: Sequence[str] = SHAPE) -> pd.DataFrame:
    """One row per (shape, setting, alternative) next to the fastest ok case of the shape."""
    rows = []
    shape = [c for c in shape if c in df]
    if df.empty or not shape:
        return pd.DataFrame()
    for key, group in df.groupby(shape, dropna=False, sort=False):
        ok = group[group.status == "ok"]
        if ok.empty:
            continue
        best = ok.loc[ok.step_ms_median.idxmin()]
        varying = [s for s in settings if s in group and group[s].astype(str).nunique() > 1]
        text = group[varying].astype(str)
        for setting in varying:
            others = [o for o in varying if o != setting]
            same = (text[others] == best[others].astype(str)).all(axis=1) if others else True
            for _, row in group[same & (text[setting] != str(best[setting]))].iterrows():
                ran = row.status == "ok"
                rows.append({**dict(zip(shape, key if isinstance(key, tuple) else (key,), strict=True)),
                             "setting": setting, "fastest": best[setting], "instead": row[setting],
                             "slower_by": row.step_ms_median / best.step_ms_median if ran else math.nan,
                             "step_ms": row.step_ms_median if ran else math.nan,
                             "fastest_step_ms": best.step_ms_median, "status": row.status})
    return pd.DataFrame(rows)
