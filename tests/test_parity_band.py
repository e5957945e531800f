"""Loss parity judged against stock's own noise: stock's runs from other weights and batch orders
make the band; a run like stock's stays inside it, a perturbed update leaves it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainperf.core.record import Record
from trainperf.workloads.parity import ParitySpec, measure_parity
from trainperf.workloads.parity_band import (
    RESOLUTION,
    band_table,
    judge,
    plot_band,
    prediction_factor,
    undecided_band,
)


def _band(steps: int = 100, n: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    base = 5 * np.exp(-np.arange(steps) / 20) + 1
    return pd.DataFrame({f"s{k}": base + rng.normal(0, 0.02, steps) for k in range(n)})


def test_a_curve_on_stock_s_mean_is_within_and_a_lasting_shift_leaves_where_it_starts():
    band = _band()
    mean = band.mean(axis=1)
    same = judge(mean, band)
    assert same["verdict"] == "within stock's noise" and same["band_dev_max"] == pytest.approx(0, abs=1e-9)
    shifted = mean.copy()
    shifted.iloc[60:] += 0.5  # far beyond a spread of about 0.02, from step 60 on
    out = judge(shifted, band)
    assert out["verdict"] == "outside it from step 60" and out["left_at"] == 60
    assert out["final_diff"] == pytest.approx(0.5, rel=0.05) and out["band_dev_final"] > 10


def test_a_blip_of_a_step_or_two_does_not_leave_the_band():
    band = _band()
    blip = band.mean(axis=1).copy()
    blip.iloc[10] += 1.0  # the smoothing spreads it over five steps, still short of a lasting stretch
    assert judge(blip, band)["verdict"] == "within stock's noise"


def test_the_prediction_factor_is_student_s_for_one_more_run():
    assert prediction_factor(3) == pytest.approx(4.303 * (1 + 1 / 3) ** 0.5)
    assert prediction_factor(40) == pytest.approx(1.96 * (1 + 1 / 40) ** 0.5)  # the normal quantile past 30


def _record(**kw) -> Record:
    spec = ParitySpec(model="tiny", batch=4, seq=64, train_steps=40, dtype="bf16", sdpa_backend="MATH",
                      device="cpu", **{"recipe": "stock", "lr": 1e-3, **kw})
    return Record("parity", spec.__dict__, "ok", measure_parity(spec))


def test_stock_from_a_new_seed_is_within_its_band_and_a_learning_rate_times_1_5_is_outside(tmp_path):
    band = [_record(seed=s) for s in range(3)]
    new_seed = _record(seed=3, run=2)  # a run like stock's, from weights and batches not in the band
    perturbed = _record(lr=1.5e-3, run=3)  # the same training with a perturbed update
    table = band_table([*band, new_seed, perturbed]).set_index("run")
    assert list(table.index) == [2, 3] and (table.seeds == 3).all()
    assert table.loc[2, "verdict"] == "within stock's noise", table.loc[2].to_dict()
    assert table.loc[3, "verdict"].startswith("outside it from step"), table.loc[3].to_dict()
    assert abs(table.loc[3, "final_diff"]) > table.loc[3, "final_ci"]
    assert plot_band([*band, new_seed, perturbed], tmp_path / "band.png")
    assert (tmp_path / "band.png").stat().st_size > 0
    assert not plot_band(band[:1], tmp_path / "none.png")  # one stock run makes no band


def test_the_suite_pages_sum_up_each_recipe_s_runs_against_the_band(tmp_path):
    from trainperf.suites.catalog import band_verdicts

    pd.DataFrame({"recipe": ["fast", "fast", "fp8", "fp8"],
                  "verdict": ["within stock's noise"] * 3 + ["outside it from step 40"],
                  "left_at": [None, None, None, 40]}).to_csv(tmp_path / "parity_band.csv", index=False)
    assert band_verdicts(tmp_path).to_dict() == {
        "fast": "within in all 2 run(s)", "fp8": "of 2 run(s): 1 within, 1 outside (from step 40)"}
    undecided = "undecided: stock's band decides nothing (seed 3 outside the others from step 90)"
    pd.DataFrame({"recipe": ["fa4", "fa4"], "left_at": [None, None],
                  "verdict": [undecided,
                              "within stock's noise"]}).to_csv(tmp_path / "parity_band.csv", index=False)
    assert band_verdicts(tmp_path).to_dict() == {
        "fa4": "of 2 run(s): 1 within, 1 undecided (stock's band decides nothing)"}
    pd.DataFrame({"recipe": ["fp8"] * 2, "left_at": [40, None],
                  "verdict": ["outside it from step 40", undecided]}).to_csv(tmp_path / "parity_band.csv",
                                                                             index=False)
    assert band_verdicts(tmp_path).to_dict() == {
        "fp8": "of 2 run(s): 1 outside (from step 40), 1 undecided (stock's band decides nothing)"}
    assert band_verdicts(tmp_path / "none").empty
    pd.DataFrame({"recipe": ["fast"] * 2, "left_at": [None, None], "band_dev_max": [1.64, 2.63],
                  "verdict": ["within stock's noise"] * 2}).to_csv(tmp_path / "parity_band.csv", index=False)
    assert band_verdicts(tmp_path).to_dict() == {"fast": "within in all 2 run(s); at most 2.6 spreads"}


def _plateau(escape: int, steps: int = 300, seed: int = 0) -> pd.Series:
    """A loss that falls to a plateau at 6, leaves it at step `escape` and falls towards 1.45, as
    the full-depth Llama on the parity task does (the escape's step varies from seed to seed)."""
    t = np.arange(steps)
    curve = 6 + 6 * np.exp(-t / 3) - 4.55 * (1 - np.exp(-np.clip(t - escape, 0, None) / 8))
    return pd.Series(curve + np.random.default_rng(seed).normal(0, 0.01, steps))


def test_stock_that_leaves_a_plateau_at_other_steps_decides_nothing():
    split = pd.DataFrame({f"seed {k}": _plateau(e, seed=k) for k, e in enumerate((120, 130, 140, 400))})
    said = undecided_band(split)  # the others have left the plateau by 140; seed 3 stays on it
    assert said.startswith("seed 3 outside the others from step ") and 140 <= int(said.split()[-1]) <= 160
    assert undecided_band(_band()) is None  # runs of one population agree
    two = pd.DataFrame({f"seed {k}": _plateau(e, seed=k) for k, e in enumerate((120, 280))})
    assert undecided_band(two, RESOLUTION["bf16"]).startswith("its end spans ± ")  # no odd one; too wide

    def record(recipe: str, curve: pd.Series, seed: int = 0) -> Record:
        return Record("parity", {"recipe": recipe, "draw": 1, "run": 1, "seed": seed, "dtype": "bf16"}, "ok",
                      {"loss_curve": ",".join(f"{x:.6g}" for x in curve)})

    stock = [record("stock", split[name], seed=k) for k, name in enumerate(split)]
    table = band_table([*stock, record("fast", _plateau(125, seed=9))])
    assert table.verdict.tolist() == [f"undecided: stock's band decides nothing ({said})"]
    agreeing = [record("stock", _plateau(e, seed=k), seed=k) for k, e in enumerate((120, 125, 130))]
    assert band_table([*agreeing, record("fast", _plateau(125, seed=9))]).verdict.tolist() == [
        "within stock's noise"]


def test_the_pretraining_optimizer_clips_to_norm_1_and_warms_up_over_a_tenth_of_the_steps():
    import torch

    from trainperf.workloads.parity import PretrainAdamW

    weight = torch.nn.Parameter(torch.zeros(4))
    opt = PretrainAdamW([weight], lr=1e-3, steps=50)  # warm-up over 5 steps
    assert opt.adamw.param_groups[0]["betas"] == (0.9, 0.95)
    rates = []
    for _ in range(7):
        rates.append(opt.adamw.param_groups[0]["lr"])
        weight.grad = torch.full((4,), 5.0)  # norm 10
        opt.step()
        assert weight.grad.norm().item() == pytest.approx(1.0)  # clipped before the update
    assert rates == pytest.approx([2e-4, 4e-4, 6e-4, 8e-4, 1e-3, 1e-3, 1e-3])
