"""Figures people would rather look at than read: lines over an axis, grouped bars."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

NO_PLOTS = "no plots without matplotlib: pip install 'trainperf[plots]'"


def available() -> bool:
    """Whether plots can be drawn here (matplotlib, an extra, is installed). Every caller asks
    first and says NO_PLOTS once where not: the numbers and files never depend on it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or a clear error naming the extra."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install 'trainperf[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def line_grid(df: pd.DataFrame, x: str, ys: list[tuple[str, str]], hue: str, path: Path,
              title: str = "", logx: bool = True, logy: bool = True):
    """One panel per (column, y-label) in `ys`, a line per `hue` value; saved to `path`."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(ys), figsize=(6 * len(ys), 4.5), squeeze=False)
    for ax, (col, label) in zip(axes[0], ys, strict=True):
        for name, group in df.dropna(subset=[col]).groupby(hue, sort=True):
            g = group.sort_values(x)
            ax.plot(g[x], g[col], marker="o", label=str(name))
        ax.set_xlabel(x)
        ax.set_ylabel(label)
        if logx:
            ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(title=hue, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig


def grouped_bars(df: pd.DataFrame, category: str, hue: str, value: str, path: Path,
                 ylabel: str, title: str = "", reference_line: float | None = None,
                 errors: str | None = None):
    """Bars of `value` per `category`, one bar per `hue` value side by side (with the half-widths
    of column `errors` as error bars); saved to `path`."""
    plt = pyplot()
    cats = list(dict.fromkeys(df[category]))
    hues = list(dict.fromkeys(df[hue]))
    width = 0.8 / max(len(hues), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(cats) * max(len(hues), 1) / 2), 4.5))
    for i, h in enumerate(hues):
        # one bar per category even where a category repeats (the last value stands)
        sub = df[df[hue] == h].groupby(category, sort=False)[value].last()
        heights = [sub.get(c, float("nan")) for c in cats]
        err = None
        if errors is not None:
            half = df[df[hue] == h].groupby(category, sort=False)[errors].last()
            up = [half.get(c, float("nan")) for c in cats]
            err = [[min(e, v) for e, v in zip(up, heights, strict=True)], up]  # never below zero
        ax.bar([j + i * width for j in range(len(cats))], heights, width, label=str(h), yerr=err, capsize=3)
    ax.set_xticks([j + width * (len(hues) - 1) / 2 for j in range(len(cats))], cats, rotation=20)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(category)
    if reference_line is not None:
        ax.axhline(reference_line, color="black", linewidth=0.8, linestyle="--")
    if hues:
        ax.legend(title=hue, fontsize=8)
    else:
        ax.text(0.5, 0.5, "no successful cases", ha="center", va="center", transform=ax.transAxes)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig


def stacked_bars(df: pd.DataFrame, path: Path, xlabel: str, title: str = "",
                 labels: dict[str, str] | None = None):
    """One horizontal bar per row of `df`, stacked from its columns in order; `labels` (by row) are
    written past each bar's end. Saved to `path`."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.55 * len(df)))
    rows = list(reversed(df.index))  # the first row on top
    left = pd.Series(0.0, index=df.index)
    for col in df.columns:
        ax.barh(rows, df.loc[rows, col], left=left[rows], label=str(col))
        left += df[col].fillna(0.0)
    for row, text in (labels or {}).items():
        ax.text(left[row], row, f" {text}", va="center", fontsize=8)
    ax.set_xlim(0, left.max() * 1.22 if len(left) else 1)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=8, ncols=len(df.columns), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title, pad=28)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig
