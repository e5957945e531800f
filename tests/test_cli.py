import json

import pytest
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.store import Store

runner = CliRunner()
FAST = ["--model", "tiny", "--seq", "16", "--batch", "2", "--warmup", "1", "--iters", "2",
        "--device", "cpu", "--quiet"]


def test_step_prints_a_table_and_stores_records(db):
    res = runner.invoke(app, ["step", *FAST, "--seq", "16,32", "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "step ms" in res.output and "tiny" in res.output
    assert [r.spec["seq"] for r in Store(db).records()] == [16, 32]


def test_rerun_flag_and_resume(db):
    runner.invoke(app, ["step", *FAST, "--db", str(db)])
    runner.invoke(app, ["step", *FAST, "--db", str(db)])
    assert len(Store(db).records()) == 1
    runner.invoke(app, ["step", *FAST, "--db", str(db), "--rerun"])
    assert len(Store(db).records()) == 2


@pytest.mark.parametrize("args, message", [
    (["--model", "huge"], "valid choices: tiny, small"),
    (["--seq", "-4"], "--seq: -4 is not an integer from 1 to 2,147,483,647"),
    (["--heads", "3"], "not divisible by n_heads 3"),
    (["--dtype", "fp16"], "needs a CUDA GPU"),
    (["--device", "tpu"], "valid choices: auto, cpu"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_stored(db, args, message):
    res = runner.invoke(app, ["step", *FAST, *args, "--db", str(db)])
    assert res.exit_code == 2
    assert message in res.output
    assert not db.exists() or Store(db).records() == []


def test_json_output(db):
    res = runner.invoke(app, ["step", *FAST, "--db", str(db), "--json"])
    rows = json.loads(res.stdout)
    assert rows[0]["status"] == "ok" and rows[0]["model"] == "tiny"


@pytest.mark.parametrize("fmt, check", [
    ("csv", lambda t: t.splitlines()[0].startswith("workload,status")),
    ("json", lambda t: json.loads(t)[0]["workload"] == "step"),
    ("markdown", lambda t: t.startswith("| workload | status")),
])
def test_exports(db, tmp_path, fmt, check):
    runner.invoke(app, ["step", *FAST, "--db", str(db)])
    out = tmp_path / f"out.{fmt}"
    res = runner.invoke(app, ["export", "--format", fmt, "-o", str(out), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert check(out.read_text())


def test_results_and_env(db):
    runner.invoke(app, ["step", *FAST, "--db", str(db)])
    res = runner.invoke(app, ["results", "--db", str(db)])
    assert res.exit_code == 0 and "step" in res.output
    env = json.loads(runner.invoke(app, ["env", "--device", "cpu"]).stdout)
    assert env["device"] == "cpu" and env["torch"]


def test_export_of_a_missing_store_fails_cleanly(tmp_path):
    res = runner.invoke(app, ["export", "--db", str(tmp_path / "none.db")])
    assert res.exit_code == 2 and "none.db': no such file" in res.output


def test_version():
    from trainperf import __version__

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"trainperf {__version__}"


@pytest.mark.parametrize("args, message", [
    (["--model", ""], "--model needs at least one value"),
    (["--batch", ""], "--batch needs at least one value"),
    (["--model", "tiny,,tiny"], "--model: empty item in 'tiny,,tiny'"),
    (["--seq", "16,"], "--seq: empty item in '16,'"),
])
def test_empty_values_and_list_items_are_refused(db, args, message):
    res = runner.invoke(app, ["step", *FAST, *args, "--db", str(db)])
    assert res.exit_code == 2 and message in res.output
    assert not db.exists()


@pytest.mark.parametrize("args, message", [
    (["attention", "--batch", "0"], "--batch must be positive, got 0"),
    (["attention", "--seq", "16,,32"], "--seq: empty item"),
    (["llama", "--iters", "0"], "--iters must be positive, got 0"),
    (["llama", "--sdpa-backend", ""], "--sdpa-backend needs at least one value"),
])
def test_zero_and_empty_values_do_not_mean_the_default(db, args, message):
    res = runner.invoke(app, [*args, "--device", "cpu", "--quiet", "--db", str(db)])
    assert res.exit_code == 2 and message in res.output
    assert not db.exists()
