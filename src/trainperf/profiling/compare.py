"""Result sets side by side: the same cases measured on two GPUs (or torch versions, …).

A result set is a `training_timing.csv` written by `trainperf llama` or a results store (.db).
Rows pair only when their whole setup matches (SETUP) at the same shape, so a `--fast` row is
never set against a stock row; a row without a partner is shown alone. Comparisons warn when the
sets differ in anything besides the axis being compared.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from trainperf.core.store import Store

SHAPE = ["batch_size", "seq_len"]
# What makes two rows the same experiment. Older CSVs lack the last three; a column that some set
# lacks is left out of the pairing (with a warning) rather than failing or pairing nothing.
SETUP = ["backend", "compile", "swaps", "kv_heads", "dtype", "inputs", "optimizer", "layers"]
CONTEXT = ["gpu", "torch", "cuda", "cudnn", "dtype", "compile", "swaps"]
CLOCK_TOLERANCE = 0.10  # median SM clocks further apart than this are worth a warning


def load_result_set(path: Path) -> pd.DataFrame:
    """The llama timing table of a CSV or a results store."""
    from trainperf.workloads.llama_sdpa import compile_mode, timing_table

    if not path.exists():
        raise ValueError(f"{path}: no such file")
    if path.suffix == ".csv":
        try:
            df = pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not a CSV file ({str(exc).splitlines()[0]})") from None
        missing = set(SHAPE + ["backend", "mean_s", "status"]) - set(df.columns)
        if missing:
            raise ValueError(f"{path} is not a trainperf llama CSV (missing {', '.join(sorted(missing))})")
    else:
        df = timing_table(Store(path, create=False).records(workload="llama"))
    if df.empty:
        raise ValueError(f"{path} holds no llama results")
    if "compile" in df:
        df["compile"] = [compile_mode(v) for v in df["compile"]]
    if "swaps" in df:  # stores written before swaps were recorded ran none
        df["swaps"] = df["swaps"].astype(object).fillna("none")
    return df


def label_sets(paths: list[Path], frames: list[pd.DataFrame]) -> list[str]:
    """Name each set by its GPU where that tells them apart, else by its file."""
    gpus = [", ".join(sorted(set(f.gpu.dropna().astype(str)))) or p.stem
            for p, f in zip(paths, frames, strict=True)]
    if len(set(gpus)) == len(gpus):
        return gpus
    labels = [f"{g} ({p.parent.name}/{p.name})" for g, p in zip(gpus, paths, strict=True)]
    if len(set(labels)) == len(labels):
        return labels
    return [f"{lab} #{i}" for i, lab in enumerate(labels, 1)]  # the same file named twice


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


def pairing_columns(frames: list[pd.DataFrame]) -> tuple[list[str], list[str]]:
    """The setup columns every set records (rows pair on these and the shape), and those left out."""
    def recorded(f: pd.DataFrame, c: str) -> bool:
        return c in f and f[c].notna().any()

    used = [c for c in SETUP if all(recorded(f, c) for f in frames)]
    return used, [c for c in SETUP if c not in used and any(recorded(f, c) for f in frames)]


def _key_text(value: object) -> str:
    """One spelling per value, whatever the source: 2, 2.0 and '2' → '2'; None/NaN → '-'."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def latest_per_case(df: pd.DataFrame, key: list[str]) -> tuple[pd.DataFrame, int]:
    """One row per case (the last one, as a store lists them oldest first) and how many repeats
    were dropped, so that a set measured twice never pairs or plots a case twice."""
    keyed = df.assign(**{c: [_key_text(v) for v in df[c]] for c in key})
    latest = keyed.drop_duplicates(subset=key, keep="last")
    return latest, len(keyed) - len(latest)


def side_by_side(frames: list[pd.DataFrame], labels: list[str]) -> pd.DataFrame:
    """One row per case (setup and shape): each set's mean s/iter and status, and the speed-up
    of each set over the first. A case some set lacks keeps its row with the gaps empty."""
    setup, _ = pairing_columns(frames)
    key = setup + SHAPE
    merged = None
    for f, lab in zip(frames, labels, strict=True):
        latest, _ = latest_per_case(f, key)
        part = latest[key + ["mean_s", "status"]].rename(columns={"mean_s": lab, "status": f"{lab} status"})
        merged = part if merged is None else merged.merge(part, on=key, how="outer")
    for lab in labels[1:]:
        merged[f"speed-up {lab} vs {labels[0]}"] = merged[labels[0]] / merged[lab]
    merged[SHAPE] = merged[SHAPE].astype(int)
    return merged.sort_values(SHAPE + setup).reset_index(drop=True)


def pairing_warnings(frames: list[pd.DataFrame], labels: list[str], table: pd.DataFrame) -> list[str]:
    """Setup columns left out of the pairing, repeated cases, and rows of `table` (side_by_side's)
    that found no partner."""
    setup, left_out = pairing_columns(frames)
    out = [f"{c} is not recorded in every set; rows are paired without it" for c in left_out]
    for f, lab in zip(frames, labels, strict=True):
        _, dropped = latest_per_case(f, setup + SHAPE)
        if dropped:
            out.append(f"{lab}: {dropped} repeated case(s); the latest of each is compared")
    alone = table[labels].isna().any(axis=1).sum()
    if alone:
        out.append(f"{alone} case(s) measured in only some sets are shown without a partner")
    return out


def case_labels(table: pd.DataFrame) -> pd.Series:
    """'1x16384 cudnn compiled per layer + loss=chunked', plus any other setup column that varies."""
    from trainperf.workloads.llama_sdpa import setup_label

    extra = [c for c in SETUP[3:] if c in table and table[c].nunique() > 1]
    names = []
    for _, row in table.iterrows():
        name = f"{row.batch_size}x{row.seq_len} " + setup_label(row.backend, row.get("compile", "off"),
                                                                 row.get("swaps", "none"))
        names.append(" ".join([name, *(f"{c}={row[c]}" for c in extra)]))
    return pd.Series(names, index=table.index)


def plot_comparison(table: pd.DataFrame, labels: list[str], out: Path) -> list[Path]:
    """compare_time.png (per backend, each set's time per case) and compare_speedup.png."""
    from trainperf.core.plots import grouped_bars

    out.mkdir(parents=True, exist_ok=True)
    table = table.assign(case_setup=case_labels(table))
    long = table.melt(id_vars=["case_setup"], value_vars=labels, var_name="set", value_name="mean_s")
    paths = [out / "compare_time.png", out / "compare_speedup.png"]
    grouped_bars(long.dropna(), "case_setup", "set", "mean_s", paths[0], "mean seconds per iteration",
                 title="time per case and setup across result sets")
    speed_cols = [c for c in table.columns if c.startswith("speed-up ")]
    sp = table.melt(id_vars=["case_setup"], value_vars=speed_cols, var_name="pair", value_name="x")
    grouped_bars(sp.dropna(), "case_setup", "pair", "x", paths[1], "speed-up", reference_line=1.0,
                 title="speed-up per case and setup (paired cases only)")
    return paths
