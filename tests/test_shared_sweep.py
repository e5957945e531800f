"""A sweep shared out over helper processes: each case measured once, by whichever process took it;
helpers placed one a GPU; a helper that fails said and its cases measured here; a Ctrl-C ends them."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch

from trainperf.core.errors import SpecError
from trainperf.core.runner import run_sweep
from trainperf.core.shared_sweep import helper_places, helpers
from trainperf.core.store import Store

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {"device": "cpu"}

# A measure a helper can import (it unpickles the function by its module's name): each case leaves
# a file named by the process that measured it; the command's own first case waits for a helper's.
CASES_MODULE = """
    import os, pathlib, time

    MARKS = pathlib.Path(os.environ["SHARED_SWEEP_MARKS"])
    if os.environ.get("SHARED_SWEEP_FAIL") and os.getpid() != int(os.environ["SHARED_SWEEP_PARENT"]):
        raise SystemExit("this helper cannot start")

    def measure(spec):
        (MARKS / f"{spec['i']}-{os.getpid()}").touch()
        if spec["i"] == 0 and os.environ.get("SHARED_SWEEP_WAIT"):  # until a helper measured one
            end = time.monotonic() + 60
            while not any(not m.name.endswith(f"-{os.getpid()}") for m in MARKS.iterdir()):
                assert time.monotonic() < end, "no helper measured a case"
                time.sleep(0.05)
        time.sleep(0.1)
        return {"pid": os.getpid()}
"""


@pytest.fixture
def cases(tmp_path, monkeypatch):
    """The module above, importable here and in the helpers; its marks' folder."""
    (tmp_path / "shared_cases.py").write_text(textwrap.dedent(CASES_MODULE))
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("SHARED_SWEEP_MARKS", str(marks))
    monkeypatch.setenv("SHARED_SWEEP_PARENT", str(os.getpid()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), SRC, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shared_cases", raising=False)
    import shared_cases

    return shared_cases, marks


def _sweep(module, db: Path, places: list[str], n: int = 8, say=print):
    specs = [{"i": i} for i in range(n)]
    with helpers("t", specs, module.measure, db, places, rerun=False, say=say):
        return run_sweep("t", specs, module.measure, Store(db), ENV, quiet=True)


def test_the_command_and_its_helpers_measure_each_case_once_between_them(cases, tmp_path, monkeypatch):
    module, marks = cases
    monkeypatch.setenv("SHARED_SWEEP_WAIT", "1")
    records = _sweep(module, tmp_path / "r.db", ["cpu"])
    assert [r.spec["i"] for r in records] == list(range(8))
    stored = Store(tmp_path / "r.db").records()
    assert sorted(r.spec["i"] for r in stored) == list(range(8))  # none twice, none missing
    assert len({r.metrics["pid"] for r in stored}) == 2  # the helper took some
    assert len(list(marks.iterdir())) == 8  # and nothing was measured and thrown away


def test_a_helper_that_cannot_run_is_said_and_its_share_is_measured_here(cases, tmp_path, monkeypatch):
    module, _ = cases
    monkeypatch.setenv("SHARED_SWEEP_FAIL", "1")
    said = []
    records = _sweep(module, tmp_path / "r.db", ["cpu"], say=said.append)
    assert {r.metrics["pid"] for r in records} == {os.getpid()}
    assert len(said) == 1, said
    assert "a helper on the CPU stopped with exit code 1: this helper cannot start" in said[0]


def _helper_logs() -> dict[str, str]:
    """What the running helpers wrote so far (shared_sweep keeps their logs in a temporary folder)."""
    return {str(p): p.read_text(errors="replace")[-2000:]
            for p in Path(tempfile.gettempdir()).glob("trainperf-helpers-*/helper-*.log")}


@pytest.mark.parametrize("ignored", [False, True])
def test_a_ctrl_c_in_the_command_ends_its_helpers(cases, tmp_path, ignored):
    """At once, also where the command was started with SIGINT ignored (a script's background
    job), a disposition its helpers inherit."""
    module, marks = cases
    specs = [{"i": i} for i in range(1000)]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignored else None
    try:
        with pytest.raises(KeyboardInterrupt), helpers("t", specs, module.measure, tmp_path / "r.db",
                                                       ["cpu", "cpu"], rerun=False):
            end = time.monotonic() + 60
            while len({m.name.split("-")[1] for m in marks.iterdir()}) < 2:  # both helpers measuring
                assert time.monotonic() < end, f"the helpers did not start; their logs: {_helper_logs()}"
                time.sleep(0.05)
            stop = time.monotonic()
            raise KeyboardInterrupt
    finally:
        if ignored:
            signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - stop < 10  # not STOP_S for each helper, then a kill
    pids = {int(m.name.split("-")[1]) for m in marks.iterdir()}
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert len(list(marks.iterdir())) < 1000


def test_helpers_go_one_to_a_gpu_other_than_the_command_s(monkeypatch):
    assert helper_places(torch.device("cpu"), 1) == []
    assert helper_places(torch.device("cpu"), 2) == ["cpu"]
    with pytest.raises(SpecError, match="--jobs must be between 1 and"):
        helper_places(torch.device("cpu"), 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")
    assert helper_places(torch.device("cuda"), 3) == ["6", "7"]
    assert helper_places(torch.device("cuda:1"), 2) == ["4"]
    with pytest.raises(SpecError, match=r"between 1 and 3 \(one process a GPU, and 3 GPU\(s\) are visible\), "
                                        "got 4"):
        helper_places(torch.device("cuda"), 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert helper_places(torch.device("cuda"), 2) == ["1"]


def test_parity_with_two_jobs_trains_each_run_once_and_refuses_jobs_it_cannot_place(tmp_path):
    from typer.testing import CliRunner

    from trainperf.cli import app

    db, out = tmp_path / "p.db", tmp_path / "out"
    args = ["parity", "--recipe", "stock", "--train-steps", "2", "--seq", "16", "--batch", "2", "--dtype",
            "fp32", "--stock-seeds", "3", "--device", "cpu", "--db", str(db), "--out", str(out), "--quiet"]
    runner = CliRunner()
    refused = runner.invoke(app, [*args, "--jobs", str((os.cpu_count() or 1) + 1)])
    assert refused.exit_code == 2 and "--jobs must be between 1 and" in refused.output, refused.output
    assert not db.exists() and not out.exists()
    res = runner.invoke(app, [*args, "--jobs", "2"])
    assert res.exit_code == 0, res.output
    runs = [(r.spec["run"], r.spec["seed"]) for r in Store(db).records()]
    assert sorted(runs) == [(1, 0), (1, 1), (1, 2)]  # stock's run and its two other seeds, once each
    assert (out / "parity.csv").exists()
