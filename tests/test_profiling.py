import json
import sqlite3

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.models.lm import LMConfig, TransformerLM
from trainperf.profiling.breakdown import breakdown, busy_time
from trainperf.profiling.nsys import NsysFormatError, read_nsys_sqlite
from trainperf.profiling.ranges import module_ranges, range_name
from trainperf.profiling.session import compare_breakdowns, load_breakdown
from trainperf.profiling.torch_prof import profile_steps, read_chrome_trace

runner = CliRunner()
EXPECTED = ["fwd.embed", "fwd.layer", "fwd.layer.attn", "fwd.layer.attn.prenorm", "fwd.layer.attn.qkv_proj",
            "fwd.layer.attn.rope", "fwd.layer.attn.sdpa", "fwd.layer.attn.o_proj", "fwd.layer.mlp",
            "fwd.layer.mlp.prenorm", "fwd.output_norm", "fwd.lm_head"]


def test_range_names():
    assert range_name("layers.3.attn.qkv_proj") == "fwd.layer.attn.qkv_proj"
    # a Hugging Face Llama's modules under the names of trainperf's LM and NVIDIA's cuDNN study
    assert range_name("model.layers.11.self_attn.q_proj") == "fwd.layer.attn.attn.q_proj"
    assert range_name("model.layers.0.input_layernorm", "bwd") == "bwd.layer.attn.prenorm"
    assert range_name("model.layers.0.post_attention_layernorm") == "fwd.layer.mlp.prenorm"
    assert range_name("model.norm") == "fwd.output_norm"
    assert range_name("layers.0.mlp") == "fwd.layer.mlp"  # trainperf's own LM keeps its names
    # wrappers that add no work of their own: checkpointing, DDP, the sharded step's loss module
    assert range_name("lm.layers.3._checkpoint_wrapped_module.attn.qkv_proj") == "fwd.layer.attn.qkv_proj"
    assert range_name("module.lm.output_norm", "bwd") == "bwd.output_norm"
    assert range_name("output_norm") == "fwd.output_norm"


def _tiny_trace(n_layers=3):
    model = TransformerLM(LMConfig(vocab_size=50, context_length=16, d_model=32, d_ff=64,
                                   n_layers=n_layers, n_heads=4))
    x = torch.randint(0, 50, (2, 16))

    def step():
        with torch.autograd.profiler.record_function("fwd"):
            loss = model(x).sum()
        with torch.autograd.profiler.record_function("bwd"):
            loss.backward()

    with module_ranges(model):
        return profile_steps(step, torch.device("cpu"))


def test_the_backward_has_module_ranges_nested_like_the_forward_s():
    trace = _tiny_trace(n_layers=3)
    r = trace.ranges
    counts = r.groupby("name").size()
    assert counts["bwd.layer"] == counts["bwd.layer.attn"] == counts["bwd.layer.mlp.down_proj"] == 3

    def inside(child, parent):
        c, ps = r[r.name == child], r[r.name == parent]
        return all(((ps.start <= s) & (ps.end >= e)).sum() == 1 for s, e in zip(c.start, c.end, strict=True))

    assert inside("bwd.layer.attn.qkv_proj", "bwd.layer.attn") and inside("bwd.layer.attn", "bwd.layer")
    assert inside("bwd.layer", "bwd") and not inside("bwd.layer.mlp.prenorm", "bwd.layer.attn")
    t = breakdown(trace).ranges.set_index("range")
    assert t.loc["bwd.layer.mlp.down_proj", "kernels"] > 0  # its matmuls for dX and dW
    parts = t.loc["bwd.layer.attn", "kernel_ms"] + t.loc["bwd.layer.mlp", "kernel_ms"]
    assert t.loc["bwd.layer", "kernel_ms"] >= parts


def test_range_tree_on_a_tiny_model():
    trace = _tiny_trace(n_layers=3)
    r = trace.ranges
    counts = r.groupby("name").size()
    for name in EXPECTED:
        assert name in counts, name
    assert counts["fwd.layer"] == 3 and counts["fwd.layer.attn.qkv_proj"] == 3
    assert counts["fwd.lm_head"] == 1 and counts["step"] == 1

    def inside(child, parent):
        c, ps = r[r.name == child], r[r.name == parent]
        return all(((ps.start <= s) & (ps.end >= e)).sum() == 1 for s, e in zip(c.start, c.end, strict=True))

    assert inside("fwd.layer.attn.qkv_proj", "fwd.layer.attn")
    assert inside("fwd.layer.attn", "fwd.layer")
    assert inside("fwd.layer", "fwd")
    assert inside("fwd.layer.mlp.prenorm", "fwd.layer.mlp")
    assert not inside("fwd.layer.mlp.prenorm", "fwd.layer.attn")


def test_modules_compiled_in_place_get_no_ranges():
    """A hook inside a compiled module would be traced into its graph; such modules are skipped."""
    model = TransformerLM(LMConfig(vocab_size=50, context_length=16, d_model=32, d_ff=64, n_layers=2,
                                   n_heads=4))
    model.layers[0].compile()  # lazy: nothing is compiled until it runs
    with module_ranges(model) as names:
        assert model.layers[0]._forward_pre_hooks == {} and model.layers[0].attn._forward_hooks == {}
        assert len(model.layers[1]._forward_pre_hooks) == 1 and len(model.output_norm._forward_hooks) == 1
    assert "fwd.layer.attn.qkv_proj" in names  # layer 1 still has its ranges


def test_attention_fwd_bwd_range_counts_kernels_launched_by_the_autograd_thread(tmp_path):
    """`profile attention --mode forward-backward`: the backward kernels come from autograd's worker thread
    (tid 2 here), and still belong to the mode's range, opened on the main thread (tid 1)."""
    def x(name, cat, ts, dur, tid, **args):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "args": args}
    events = [x("fwd+bwd", "user_annotation", 0, 100, 1), x("fwd.layer", "user_annotation", 0, 100, 1),
              x("cudaLaunchKernel", "cuda_runtime", 10, 1, 1, correlation=1),
              x("cudaLaunchKernel", "cuda_runtime", 50, 1, 2, correlation=2),
              x("fwd_kernel", "kernel", 20, 30, 7, correlation=1),
              x("bwd_kernel", "kernel", 60, 30, 7, correlation=2)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ranges = breakdown(read_chrome_trace(path, gpu=True)).ranges.set_index("range")
    assert ranges.loc["fwd+bwd", "kernels"] == 2  # a phase: any thread
    assert ranges.loc["fwd.layer", "kernels"] == 1  # a module range: its own thread only


def test_cpu_breakdown_pipeline_counts_nested_ranges():
    bd = breakdown(_tiny_trace(n_layers=2))
    t = bd.ranges.set_index("range")
    assert t.loc["fwd.layer", "calls"] == 2
    assert t.loc["fwd.layer.attn", "kernels"] > t.loc["fwd.layer.attn.qkv_proj", "kernels"] > 0
    assert t.loc["fwd.layer", "kernel_ms"] >= t.loc["fwd.layer.attn", "kernel_ms"]
    assert t.loc["step", "share"] == pytest.approx(1.0)
    assert bd.unattributed_kernels == 0
    assert 0 <= bd.idle_fraction < 1 and not bd.kernels.empty


def test_busy_time_counts_overlap_once():
    k = pd.DataFrame({"start": [0.0, 5.0, 20.0], "end": [10.0, 12.0, 25.0]})
    assert busy_time(k) == 17.0


def make_nsys_fixture(path, drop=None):
    """A small SQLite file with the tables and columns nsys exports (times in ns)."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL,
            rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
            endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
            eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER,
            returnValue INTEGER, callchainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
            deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER,
            globalPid INTEGER, demangledName INTEGER, shortName INTEGER, mangledName INTEGER);
    """)
    strings = {1: "fwd.layer", 2: "kernA", 3: "kernB", 4: "kernC", 5: "kernD", 6: "kernE", 7: "kernF",
               8: "cudaLaunchKernel"}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    t1, t2 = 100, 200
    nvtx = [(0, 1_000_000, 59, "step", t1, None), (0, 500_000, 59, "fwd", t1, None),
            (10_000, 200_000, 59, None, t1, 1), (210_000, 400_000, 59, None, t1, 1),  # names via textId
            (500_000, 900_000, 59, "bwd", t1, None), (0, 1_000_000, 59, "other", t2, None),
            (0, None, 59, "never-closed", t1, None), (5, 5, 34, "a mark, not a range", t1, None)]
    con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, textId) '
                    "VALUES (?,?,?,?,?,?)", nvtx)
    launches = [(1, 20_000, t1), (2, 220_000, t1), (3, 600_000, t1), (4, 950_000, t1), (5, 1_500_000, t1),
                (6, 50_000, t2)]
    con.executemany('INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (correlationId, start, "end", globalTid, nameId)'
                    " VALUES (?,?,?,?,8)", [(c, s, s + 1000, t) for c, s, t in launches])
    kernels = [(c, s + 5000, s + 5000 + 1000 * c, 1 + c) for c, s, _ in launches]
    con.executemany('INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (correlationId, start, "end", shortName) '
                    "VALUES (?,?,?,?)", kernels)
    if drop:
        con.execute(f"DROP TABLE {drop}")
    con.commit()
    con.close()
    return path


# One training step as both readers see it (µs). T1 is the main thread, T2 autograd's worker,
# T3 a thread of the user's that has nothing to do with the step.
T1, T2, T3 = 101, 102, 103
STEP_RANGES = [  # name, start, end, thread that opened it, NVTX event type
    ("step", 0, 1000, T1, 59), ("fwd", 0, 400, T1, 59), ("fwd.layer", 10, 100, T1, 59),
    ("fwd.layer", 110, 200, T1, 59), ("bwd", 400, 900, T1, 59),
    ("bwd.layer", 450, 600, T2, 59),  # a module range pushed where autograd runs the backward
    ("user.outer", 300, 950, T1, 60),  # a start/end range, ended on another thread
]
STEP_LAUNCHES = [  # kernel, launch time, launching thread, kernel duration
    ("kernA", 20, T1, 10), ("kernB", 120, T1, 20), ("kernC", 300, T1, 30),
    ("kernD", 500, T2, 40),  # the backward's kernels come from the worker thread
    ("kernE", 700, T2, 50),
    ("kernF", 150, T3, 60),  # inside fwd.layer's window, but from another thread
    ("kernG", 1200, T3, 70),  # outside every range
]
# Written by hand from the rule: phase and user ranges take every thread's launches in their
# window, module ranges only their own thread's.
STEP_EXPECTED = {  # range: (calls, kernels, kernel µs)
    "step": (1, 6, 10 + 20 + 30 + 40 + 50 + 60), "fwd": (1, 4, 10 + 20 + 30 + 60),
    "fwd.layer": (2, 2, 10 + 20), "bwd": (1, 2, 40 + 50), "bwd.layer": (1, 1, 40),
    "user.outer": (1, 3, 30 + 40 + 50),
}


def step_as_nsys(path):
    con = sqlite3.connect(make_nsys_fixture(path))
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
        con.execute(f"DELETE FROM {table}")
    con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, endGlobalTid) '
                    "VALUES (?,?,?,?,?,?)", [(s * 1000, e * 1000, kind, name, t, T2 if kind == 60 else None)
                                             for name, s, e, t, kind in STEP_RANGES])
    names = {name: 100 + i for i, (name, *_) in enumerate(STEP_LAUNCHES)}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in names.items()])
    for corr, (name, at, thread, dur) in enumerate(STEP_LAUNCHES, 1):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME "
                    '(correlationId, start, "end", globalTid, nameId) VALUES (?,?,?,?,8)',
                    (corr, at * 1000, at * 1000 + 500, thread))
        con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (correlationId, start, "end", shortName) '
                    "VALUES (?,?,?,?)", (corr, (at + 2) * 1000, (at + 2 + dur) * 1000, names[name]))
    con.commit()
    con.close()
    return path


def step_as_chrome_trace(path):
    def x(name, cat, ts, dur, tid, **args):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "args": args}
    events = [x(name, "user_annotation", s, e - s, t) for name, s, e, t, _ in STEP_RANGES]
    for corr, (name, at, thread, dur) in enumerate(STEP_LAUNCHES, 1):
        events += [x("cudaLaunchKernel", "cuda_runtime", at, 0.5, thread, correlation=corr),
                   x(name, "kernel", at + 2, dur, 7, correlation=corr)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize("reader", ["nsys", "torch.profiler"])
def test_a_training_step_is_attributed_by_the_rule_in_both_readers(tmp_path, reader):
    trace = (read_nsys_sqlite(step_as_nsys(tmp_path / "s.sqlite")) if reader == "nsys" else
             read_chrome_trace(step_as_chrome_trace(tmp_path / "s.json"), gpu=True))
    bd = breakdown(trace)
    got = {r.range: (r.calls, r.kernels, round(r.kernel_ms * 1e3, 6)) for r in bd.ranges.itertuples()}
    assert got == STEP_EXPECTED
    assert bd.unattributed_kernels == 1  # kernG


def test_both_readers_give_the_same_table_for_the_same_step(tmp_path):
    a = breakdown(read_nsys_sqlite(step_as_nsys(tmp_path / "s.sqlite")))
    b = breakdown(read_chrome_trace(step_as_chrome_trace(tmp_path / "s.json"), gpu=True))
    pd.testing.assert_frame_equal(a.ranges, b.ranges)
    pd.testing.assert_frame_equal(a.kernels, b.kernels)
    assert a.idle_fraction == pytest.approx(b.idle_fraction)


def test_the_cpu_stand_in_counts_each_op_s_self_time(tmp_path):
    """An op that calls smaller ones (sdpa calling fill_ and empty) counts its own time, not
    theirs: the CPU table names the op that does the work."""
    def op(name, ts, dur, tid=1):
        return {"ph": "X", "name": name, "cat": "cpu_op", "ts": ts, "dur": dur, "tid": tid, "args": {}}
    events = [{"ph": "X", "name": "fwd", "cat": "user_annotation", "ts": 0, "dur": 200, "tid": 1, "args": {}},
              op("aten::scaled_dot_product_attention", 0, 100), op("aten::empty", 1, 4),
              op("aten::fill_", 10, 6), op("aten::mm", 120, 50), op("aten::add", 130, 50, tid=2)]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    bd = breakdown(read_chrome_trace(path, gpu=False))
    per = bd.kernels.set_index("kernel")["total_ms"] * 1e3
    assert per.to_dict() == pytest.approx({"aten::scaled_dot_product_attention": 90, "aten::mm": 50,
                                           "aten::add": 50, "aten::fill_": 6, "aten::empty": 4})
    assert bd.kernels.iloc[0]["kernel"] == "aten::scaled_dot_product_attention"


def test_nsys_missing_table_is_a_clear_error(tmp_path):
    path = make_nsys_fixture(tmp_path / "t.sqlite", drop="CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(NsysFormatError, match="lacks the table.*KIND_KERNEL.*--trace=cuda,nvtx"):
        read_nsys_sqlite(path)
    res = runner.invoke(app, ["nsys-decode", str(path)])
    assert res.exit_code == 2 and "lacks the table" in res.output


def test_nsys_decode_cli(tmp_path):
    res = runner.invoke(app, ["nsys-decode", str(make_nsys_fixture(tmp_path / "t.sqlite")),
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "fwd.layer" in res.output and "1 kernels outside any range" in res.output
    assert (tmp_path / "nsys_t.json").exists()


def test_profile_cli_and_compare_of_two_stored_breakdowns(tmp_path):
    outs = []
    for attention in ("naive", "sdpa"):
        res = runner.invoke(app, ["profile", "step", "--device", "cpu", "--model", "tiny", "--seq", "32",
                                  "--batch", "2", "--attention", attention, "--out", str(tmp_path)])
        assert res.exit_code == 0, res.output
        outs.append(tmp_path / f"profile_step_tiny_seq32_fp32_{attention}_torch.json")
    data = json.loads(outs[0].read_text())
    assert data["meta"]["spec"]["attention"] == "naive" and data["ranges"]
    a, _ = load_breakdown(outs[0])
    b, _ = load_breakdown(outs[1])
    table = compare_breakdowns(a, b).set_index("range")
    # naive attention is several ops (matmul, mask, softmax, matmul); SDPA on the CPU is one
    assert table.loc["fwd.layer.attn.sdpa", "A kernels"] > table.loc["fwd.layer.attn.sdpa", "B kernels"]
    assert table.loc["fwd.layer", "speed-up"] == pytest.approx(
        table.loc["fwd.layer", "A ms"] / table.loc["fwd.layer", "B ms"])
    data["top_kernels"] = data.pop("kernels")  # files from before every kernel was kept
    outs[0].write_text(json.dumps(data))
    assert load_breakdown(outs[0])[0].kernels.equals(a.kernels)
    csv = tmp_path / "c.csv"
    res = runner.invoke(app, ["profile-compare", str(outs[0]), str(outs[1]), "--file", str(csv)])
    assert res.exit_code == 0 and "speed-up" in res.output
    assert list(pd.read_csv(csv).columns) == ["range", "calls", "A kernels", "A ms",
                                                             "B kernels", "B ms", "speed-up"]


def test_nsys_command_line_is_printed():
    res = runner.invoke(app, ["profile", "step", "--device", "cpu", "--model", "tiny", "--nsys"])
    assert res.exit_code == 0
    assert "nsys profile --trace=cuda,nvtx --export=sqlite" in res.output and "--ranges-only" in res.output
