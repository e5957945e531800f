"""Data-parallel variants in alternating rounds: every variant once a round, in one process group,
and a lead stated only where its interval clears zero."""

from __future__ import annotations

from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.record import Record
from trainperf.core.store import Store
from trainperf.workloads.ddp_rounds import rounds_table

SETUP = {"bucket_mb": None, "shard_optimizer": False, "link": "auto", "model": "tiny", "world_size": 2}


def _rec(variant: str, rnd: int, ms: float) -> Record:
    return Record("ddp", {**SETUP, "variant": variant, "round": rnd}, "ok",
                  {"step_ms_median": ms, "hidden_share": 0.5})


def test_a_lead_is_stated_only_where_its_interval_clears_one():
    steady = [_rec("naive", r, 100 + r) for r in (1, 2, 3)] + [_rec("flat", r, 80 + r) for r in (1, 2, 3)]
    noisy = [_rec("overlap", 1, 60.0), _rec("overlap", 2, 140.0), _rec("overlap", 3, 90.0)]
    table = rounds_table(steady + noisy).set_index("variant")
    assert table.loc["flat", "lead"].startswith("1.2") and "faster" in table.loc["flat", "lead"]
    assert table.loc["flat", "vs_naive"] > 1 + table.loc["flat", "vs_naive_ci95"]
    assert table.loc["overlap", "lead"] == "no lead established"
    assert table.loc["naive", "rounds"] == 3 and table.loc["naive", "step_ms_median"] == 102
    assert table.loc["naive", "lead"] == ""


def test_the_cli_runs_the_variants_round_after_round_and_writes_the_rounds_table(tmp_path):
    db = tmp_path / "r.db"
    res = CliRunner().invoke(app, ["ddp", "--world-size", "2", "--variant", "naive,flat", "--rounds", "2",
                                   "--iters", "1", "--warmup", "0", "--seq", "16", "--db", str(db),
                                   "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    order = [(r.spec["round"], r.spec["variant"]) for r in Store(db).records(workload="ddp")]
    assert order == [(1, "naive"), (1, "flat"), (2, "naive"), (2, "flat")]
    table = (tmp_path / "ddp_rounds.csv").read_text()
    assert table.startswith("variant,") and "vs_naive" in table.splitlines()[0]
    assert (tmp_path / "ddp_steps.png").stat().st_size > 0
