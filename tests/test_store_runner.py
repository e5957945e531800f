import gc
import multiprocessing as mp
import sqlite3
import weakref

import pytest
import torch

from trainperf.core.errors import Unsupported
from trainperf.core.record import Record
from trainperf.core.runner import run_sweep
from trainperf.core.store import Store, to_frame

ENV = {"device": "cpu", "gpu_name": None, "torch": torch.__version__}


def test_append_and_read_back(db):
    store = Store(db)
    store.append(Record("step", {"size": "tiny", "context": 8}, "ok", {"step_ms_median": 1.5}, env=ENV))
    store.append(Record("step", {"size": "tiny", "context": 16}, "oom", reason="boom", env=ENV))
    recs = Store(db).records()
    assert [r.status for r in recs] == ["ok", "oom"]
    assert recs[0].metrics["step_ms_median"] == 1.5
    assert recs[1].reason == "boom"
    assert len(Store(db).records(status="oom")) == 1


def test_unknown_status_is_refused():
    with pytest.raises(ValueError, match="status"):
        Record("step", {}, "weird")


def _writer(path, worker, n):
    store = Store(path)
    for i in range(n):
        store.append(Record("step", {"worker": worker, "i": i}, "ok", {"x": i}, env=ENV))


def test_concurrent_writers_do_not_corrupt_the_store(db):
    Store(db)
    procs = [mp.get_context("spawn").Process(target=_writer, args=(str(db), w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    recs = Store(db).records()
    assert len(recs) == 160
    assert {(r.spec["worker"], r.spec["i"]) for r in recs} == {(w, i) for w in range(4) for i in range(40)}
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _measure(spec):
    kind = spec["kind"]
    if kind == "oom":
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has ...")
    if kind == "unsupported":
        raise Unsupported("no kernel for this")
    if kind == "error":
        raise RuntimeError("something broke")
    return {"value": spec["n"]}


def test_failures_become_records_and_the_sweep_goes_on(db):
    specs = [{"kind": "ok", "n": 1}, {"kind": "oom", "n": 2}, {"kind": "unsupported", "n": 3},
             {"kind": "error", "n": 4}, {"kind": "ok", "n": 5}]
    recs = run_sweep("t", specs, _measure, Store(db), ENV, quiet=True)
    assert [r.status for r in recs] == ["ok", "oom", "unsupported", "error", "ok"]
    assert recs[1].metrics["oom_tried_gb"] == 2.5
    assert "Tried to allocate 2.50 GiB" in recs[1].reason
    assert recs[2].reason == "no kernel for this"
    assert "RuntimeError: something broke" in recs[3].reason
    assert len(Store(db).records()) == 5


def test_rerun_skips_stored_cases_but_retries_errors(db):
    specs = [{"kind": "ok", "n": 1}, {"kind": "oom", "n": 2}, {"kind": "error", "n": 3}]
    calls = []

    def counting(spec):
        calls.append(spec["n"])
        return _measure(spec)

    run_sweep("t", specs, counting, Store(db), ENV, quiet=True)
    assert calls == [1, 2, 3]
    again = run_sweep("t", specs, counting, Store(db), ENV, quiet=True)
    assert calls == [1, 2, 3, 3]
    assert [r.status for r in again] == ["ok", "oom", "error"]
    run_sweep("t", specs, counting, Store(db), ENV, quiet=True, rerun=True)
    assert calls == [1, 2, 3, 3, 1, 2, 3]


def test_off_a_terminal_each_finished_case_is_one_line_and_a_stored_one_says_so(db):
    import io
    import re

    from rich.console import Console

    specs = [{"kind": "ok", "n": 1}, {"kind": "oom", "n": 2}]

    def sweep(terminal: bool, quiet: bool = False) -> str:
        out = io.StringIO()
        run_sweep("t", specs, _measure, Store(db), ENV, label=lambda s: f"case {s['n']}", quiet=quiet,
                  console=Console(file=out, force_terminal=terminal, width=120))
        return out.getvalue()

    assert re.fullmatch(r"t 1/2 0:00:0\d case 1: ok\nt 2/2 0:00:0\d case 2: oom\n", sweep(False))
    assert re.fullmatch(r"t 1/2 0:00:00 case 1: ok \(stored\)\nt 2/2 0:00:00 case 2: oom \(stored\)\n",
                        sweep(False))  # resumed from the store
    assert "(stored)" not in sweep(True) and "2/2" in sweep(True)  # the bar's own frames
    assert sweep(False, quiet=True) == ""


class _Cycle:
    """An object in a reference cycle: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_sweep_frees_each_case_s_cycles_with_the_heap_frozen_and_leaves_nothing_frozen(db):
    """The heap alive before a sweep is frozen for it, so collections between cases walk only what
    the cases made; a case's cycles are still freed before the next case, and an object alive
    before the sweep that becomes garbage during it is freed once the sweep ends."""
    older = [_Cycle()]
    older_ref = weakref.ref(older[0])
    made: list[weakref.ref] = []
    seen = []

    def measure(spec):
        seen.append((gc.get_freeze_count() > 0, [ref() is None for ref in made]))
        made.append(weakref.ref(_Cycle()))
        older.clear()  # garbage now, but frozen
        return {"x": spec["i"]}

    run_sweep("step", [{"i": i} for i in range(3)], measure, Store(db), ENV, quiet=True)
    assert seen == [(True, []), (True, [True]), (True, [True, True])]
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert older_ref() is None


def test_same_case_on_another_gpu_is_not_skipped(db):
    spec = [{"kind": "ok", "n": 1}]
    run_sweep("t", spec, _measure, Store(db), {**ENV, "gpu_name": "GPU A"}, quiet=True)
    run_sweep("t", spec, _measure, Store(db), {**ENV, "gpu_name": "GPU B"}, quiet=True)
    assert len(Store(db).records()) == 2


def test_interrupted_sweep_keeps_what_it_measured_and_resumes(db):
    specs = [{"kind": "ok", "n": i} for i in range(5)]

    def interrupt_at_3(spec):
        if spec["n"] == 3:
            raise KeyboardInterrupt
        return _measure(spec)

    with pytest.raises(KeyboardInterrupt):
        run_sweep("t", specs, interrupt_at_3, Store(db), ENV, quiet=True)
    assert [r.spec["n"] for r in Store(db).records()] == [0, 1, 2]
    calls = []
    run_sweep("t", specs, lambda s: calls.append(s["n"]) or _measure(s), Store(db), ENV, quiet=True)
    assert calls == [3, 4]
    assert len(Store(db).records()) == 5


def test_frame_flattens_spec_metrics_and_env(db):
    run_sweep("t", [{"kind": "ok", "n": 7}], _measure, Store(db), ENV, quiet=True)
    df = to_frame(Store(db).records())
    assert {"workload", "status", "kind", "n", "value", "reason", "env_torch"} <= set(df.columns)
    assert df.loc[0, "value"] == 7


def test_frame_keeps_a_spec_field_and_a_metric_of_one_name():
    record = Record("llama", {"loss": "chunked", "batch": 1}, "ok", {"loss": 12.17, "mean_s": 0.3}, env=ENV)
    row = to_frame([record]).iloc[0]
    assert (row["loss"], row["loss_value"], row["mean_s"]) == ("chunked", 12.17, 0.3)


def test_the_environment_names_the_kernel_libraries_installed_and_only_those():
    from trainperf.core.env import capture, installed_versions

    assert installed_versions(("torch", "no-such-distribution-here")) == {"torch": torch.__version__}
    packages = capture(torch.device("cpu"))["packages"]
    assert packages.get("triton") == installed_versions(("triton",)).get("triton")
    assert "no-such-distribution-here" not in packages
