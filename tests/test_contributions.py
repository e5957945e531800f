"""What each choice of the fastest case contributed: neighbours of the fastest case, one setting
changed at a time, with the status of those that did not run."""

import math

import pandas as pd

from trainperf.workloads.contributions import contributions


def case(checkpoint, compile, attention, step, status="ok"):
    return {"model": "cs336-8b", "world_size": 2, "batch": 2, "seq": 32768, "checkpoint": checkpoint,
            "compile": compile, "attention": attention, "status": status,
            "step_ms_median": step if status == "ok" else None}


def test_each_setting_is_set_against_the_fastest_case_with_only_it_changed():
    df = pd.DataFrame([case("full", True, "fa4", 4000), case("full", False, "fa4", 5000),
                       case("full", True, "sdpa", 4800), case("ops", True, "fa4", None, "oom"),
                       case("full", False, "sdpa", 6000)])  # two settings changed: no row of its own
    rows = contributions(df).set_index("setting")
    assert sorted(rows.index) == ["attention", "checkpoint", "compile"]
    assert rows.loc["compile", "instead"] == False and rows.loc["compile", "slower_by"] == 1.25  # noqa: E712
    assert rows.loc["attention", "instead"] == "sdpa" and rows.loc["attention", "slower_by"] == 1.2
    assert rows.loc["checkpoint", "status"] == "oom" and math.isnan(rows.loc["checkpoint", "slower_by"])
    assert (rows.fastest_step_ms == 4000).all()


def test_shapes_are_compared_apart_and_a_shape_with_nothing_run_has_no_row():
    other = {"model": "xl", "world_size": 1}
    df = pd.DataFrame([case("full", True, "fa4", 4000), case("full", False, "fa4", 5000),
                       {**case("full", True, "fa4", 900), **other},
                       {**case("full", False, "fa4", 600), **other},
                       {**case("full", True, "fa4", None, "oom"), "world_size": 4},
                       {**case("full", False, "fa4", None, "oom"), "world_size": 4}])
    rows = contributions(df)
    assert list(zip(rows.model, rows.world_size, rows.fastest, rows.slower_by, strict=True)) == [
        ("cs336-8b", 2, True, 1.25), ("xl", 1, False, 1.5)]
