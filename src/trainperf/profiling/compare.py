"""Result sets side by side: the same cases measured on two GPUs (or torch versions, …).

A result set is a `training_timing.csv` written by `trainperf llama` or a results store (.db).
Comparisons warn when the sets differ in anything besides the axis being compared.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from trainperf.core.store import Store

CASE = ["backend", "batch_size", "seq_len"]
CONTEXT = ["gpu", "torch", "cuda", "cudnn", "dtype", "compile", "swaps"]
CLOCK_TOLERANCE = 0.10  # median SM clocks further apart than this are worth a warning


def load_result_set(path: Path) -> pd.DataFrame:
    """The llama timing table of a CSV or a results store."""
    from trainperf.workloads.llama_sdpa import timing_table

    if not path.exists():
        raise ValueError(f"{path}: no such file")
    if path.suffix == ".csv":
        df = pd.read_csv(path)
        missing = set(CASE + ["mean_s", "status"]) - set(df.columns)
        if missing:
            raise ValueError(f"{path} is not a trainperf llama CSV (missing {', '.join(sorted(missing))})")
        return df
    return timing_table(Store(path).records(workload="llama"))


def label_sets(paths: list[Path], frames: list[pd.DataFrame]) -> list[str]:
    """Name each set by its GPU where that tells them apart, else by its file."""
    gpus = [", ".join(sorted(set(f.gpu.dropna().astype(str)))) or p.stem
            for p, f in zip(paths, frames, strict=True)]
    if len(set(gpus)) == len(gpus):
        return gpus
    return [f"{g} ({p.parent.name}/{p.name})" for g, p in zip(gpus, paths, strict=True)]


def context_warnings(frames: list[pd.DataFrame], labels: list[str], axis: str = "gpu") -> list[str]:
    """One line per context column (other than `axis`) whose values differ between sets."""
    warnings = []
    for col in CONTEXT:
        if col == axis:
            continue
        values = [sorted(set(f[col].dropna().astype(str))) if col in f else [] for f in frames]
        if len({tuple(v) for v in values}) > 1:
            shown = "; ".join(f"{lab}: {', '.join(v) or '?'}" for lab, v in zip(labels, values, strict=True))
            warnings.append(f"{col} differs ({shown})")
    clocks = [f["sm_clock_mhz"].median() for f in frames if "sm_clock_mhz" in f]
    clocks = [c for c in clocks if pd.notna(c)]
    if len(clocks) == len(frames) and max(clocks) > (1 + CLOCK_TOLERANCE) * min(clocks):
        shown = "; ".join(f"{lab}: {c:.0f} MHz" for lab, c in zip(labels, clocks, strict=True))
        warnings.append(f"SM clocks differ by more than 10% ({shown})")
    return warnings


def side_by_side(frames: list[pd.DataFrame], labels: list[str]) -> pd.DataFrame:
    """One row per case: each set's mean s/iter (or its status) and speed-up over the first set."""
    merged = None
    for f, lab in zip(frames, labels, strict=True):
        part = f[CASE + ["mean_s", "status"]].rename(columns={"mean_s": lab, "status": f"{lab} status"})
        merged = part if merged is None else merged.merge(part, on=CASE, how="outer")
    for lab in labels[1:]:
        merged[f"speed-up {lab} vs {labels[0]}"] = merged[labels[0]] / merged[lab]
    return merged.sort_values(CASE).reset_index(drop=True)


def plot_comparison(table: pd.DataFrame, labels: list[str], out: Path) -> list[Path]:
    """compare_time.png (per backend, each set's time per case) and compare_speedup.png."""
    from trainperf.core.plots import grouped_bars

    out.mkdir(parents=True, exist_ok=True)
    table = table.assign(case=table.batch_size.astype(str) + "x" + table.seq_len.astype(str))
    long = table.melt(id_vars=["backend", "case"], value_vars=labels, var_name="set", value_name="mean_s")
    long = long.assign(case_backend=long.case + " " + long.backend.str.replace("_ATTENTION", ""))
    paths = [out / "compare_time.png", out / "compare_speedup.png"]
    grouped_bars(long.dropna(), "case_backend", "set", "mean_s", paths[0], "mean seconds per iteration",
                 title="time per case and backend across result sets")
    speed_cols = [c for c in table.columns if c.startswith("speed-up ")]
    sp = table.melt(id_vars=["case", "backend"], value_vars=speed_cols, var_name="pair", value_name="x")
    sp = sp.assign(case_backend=sp.case + " " + sp.backend.str.replace("_ATTENTION", ""))
    grouped_bars(sp.dropna(), "case_backend", "pair", "x", paths[1], "speed-up", reference_line=1.0,
                 title="speed-up per case and backend")
    return paths
