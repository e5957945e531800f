"""Judge parity runs against another run's stock band: every finished run of RUNS.csv (a parity.csv
that has too few stock seeds for a band of its own, e.g. an interrupted float8-causes part)
against stock's band of the same draw in BAND.csv, with parity_band.judge. Also prints how far
RUNS.csv's stock run lies from BAND.csv's stock run of the same seed: where that gap is inside the
band, the band is a fair yardstick for runs made elsewhere (another GPU, another day).
usage: PYTHONPATH=src python3 benchmarks/probes/parity_against_band.py BAND.csv RUNS.csv
"""

from __future__ import annotations

import sys

import pandas as pd

from trainperf.workloads.parity_band import RESOLUTION, judge


def curve(row: pd.Series) -> pd.Series:
    return pd.Series([float(x) for x in row.loss_curve.split(",")])


def main(band_csv: str, runs_csv: str) -> None:
    given, runs = pd.read_csv(band_csv), pd.read_csv(runs_csv)
    given, runs = given[given.status == "ok"], runs[runs.status == "ok"]
    for draw, of_draw in runs.groupby("draw"):
        stock = given[(given.draw == draw) & (given.recipe == "stock")]
        stock = stock[stock.run == stock.run.min()]
        band = pd.DataFrame({f"seed {r.seed}": curve(r) for _, r in stock.iterrows()})
        print(f"draw {draw}: stock's band of {band.shape[1]} seeds from {band_csv}")
        for _, r in of_draw.iterrows():
            found = judge(curve(r), band, RESOLUTION.get(r["dtype"], RESOLUTION["fp32"]))
            print(f"  {r.recipe:14s} seed {r.seed}: largest {found['band_dev_max']:.1f} spreads, "
                  f"last fifth {found['band_dev_final']:+.2f}, final {found['final_diff']:+.4f} "
                  f"± {found['final_ci']:.4f}: {found['verdict']}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
