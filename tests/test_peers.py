"""Recipes (`llama --recipe`) and loss parity (`trainperf parity`): the plumbing, the rows of
recipes whose package is missing, the parity computation, and on a GPU each recipe's first
loss and gradients against stock's."""

import json
import math

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.record import Record
from trainperf.core.store import Store
from trainperf.models import peers
from trainperf.workloads import parity
from trainperf.workloads.llama_sdpa import RECIPES, LlamaStep, recipe_setup, setup_spec

runner = CliRunner()
CPU = ["--device", "cpu", "--quiet"]


def test_a_recipe_whose_package_is_missing_is_an_unsupported_row_naming_it(db, tmp_path, monkeypatch):
    monkeypatch.setattr("trainperf.models.peers.find_spec", lambda name: None)
    res = runner.invoke(app, ["llama", *CPU, "--recipe", "stock,liger,fp8", "--batch-seq", "1x32",
                              "--iters", "1", "--warmup", "1", "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    recipes = pd.read_csv(tmp_path / "training_timing.csv").recipe  # rows that did not run name theirs too
    assert list(dict.fromkeys(recipes)) == ["stock", "liger", "fp8"]
    rows = {r.spec["library"] + "/" + r.spec["float8"]: r for r in Store(db).records()}
    assert rows["none/off"].status == "ok"
    liger = rows["liger/off"]
    assert liger.status == "unsupported" and "pip install 'trainperf[liger]'" in liger.reason
    assert rows["none/torchao"].status == "unsupported" and "trainperf[float8]" in rows["none/torchao"].reason


def test_every_recipe_runs_at_one_shape_before_the_next(db, tmp_path, monkeypatch):
    """A sweep stopped early still sets every recipe side by side at the shapes it reached."""
    monkeypatch.setattr("trainperf.models.peers.find_spec", lambda name: None)  # liger: a quick row
    res = runner.invoke(app, ["llama", *CPU, "--model", "tiny", "--recipe", "stock,liger",
                              "--batch-seq", "1x16,1x32", "--iters", "1", "--warmup", "1", "--db", str(db),
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    order = [(r.spec["library"], r.spec["seq"]) for r in Store(db).records()]
    assert order == [("none", 16), ("liger", 16), ("none", 32), ("liger", 32)]


def test_a_recipe_run_names_its_rows_columns_and_bars_by_recipe(db, tmp_path):
    from trainperf.workloads import llama_sdpa

    tiny = ["--model", "tiny", "--iters", "1", "--warmup", "1", "--dtype", "fp32"]
    res = runner.invoke(app, ["llama", *CPU, *tiny, "--recipe", "stock,fast", "--sdpa-backend",
                              "MATH,FLASH_ATTENTION", "--batch-seq", "1x32", "--db", str(db),
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "training_timing.csv")
    assert list(df.recipe) == ["stock", "stock", "fast", "fast"]
    summary = llama_sdpa.summary_table(df, by_recipe=True)
    assert list(summary.columns) == ["shape", "fast (math) speed-up", "fast (flash) speed-up", "stock (math)",
                                     "stock (flash)", "fast (math)", "fast (flash)"]
    assert summary.attrs["against"] == "the best of stock"
    assert summary.attrs["title"] == "speed-up over the best of stock of each shape; seconds per iteration"
    no_stock = df[df.recipe == "fast"].assign(vs_best_stock=float("nan"))  # as timing_table leaves it
    without_stock = llama_sdpa.summary_table(no_stock, by_recipe=True)
    assert list(without_stock.columns) == ["shape", "fast (math)", "fast (flash)"]
    assert "no stock row ran" in without_stock.attrs["title"]
    # a setup no recipe names keeps its own label; without by_recipe every setup does
    df.loc[0, ["swaps", "recipe"]] = ["norm=fused", None]
    assert "math + norm=fused" in llama_sdpa.summary_table(df, by_recipe=True).columns
    df.loc[0, ["swaps", "compile", "recipe"]] = ["none", "on", "compile"]  # compile's rows count as stock
    assert llama_sdpa.summary_table(df, by_recipe=True).attrs["against"] == "the best of stock, compile"
    assert "math compiled per layer + loss=chunked" in llama_sdpa.summary_table(df).columns


def test_a_row_s_recipe_is_read_from_its_spec_whether_or_not_it_ran():
    from trainperf.workloads.llama_sdpa import recipe_names, recipe_of

    fast = {"sdpa_backend": "FA4", "compile": "layers", "loss": "chunked", "swiglu": "quack", "gemm": "quack",
            "graph": "step", "kv_heads": "packed"}
    assert recipe_of(fast) == "fast"
    assert recipe_of({"sdpa_backend": "MATH", "library": "liger"}) == "liger"  # unsupported rows too
    assert recipe_of({"sdpa_backend": "FA4"}) == "fa4"  # stock on FA4 is the fa4 recipe
    assert recipe_of({"sdpa_backend": "MATH", "compile": True}) == "compile"
    assert recipe_of({"sdpa_backend": "MATH", "norm": "fused"}) is None
    fp8 = {"sdpa_backend": "FA4", "compile": "layers-tuned", "loss": "chunked", "float8": "torchao",
           "graph": "step"}
    assert recipe_of(fp8) == "fp8"
    assert recipe_of({**fp8, "kv_heads": "packed"}) == "fp8 + kv-heads packed"  # --kv-heads on a recipe
    assert recipe_of({"sdpa_backend": "FA4", "norm": "fused", "kv_heads": "packed"}) is None
    # a table from before the recipe column: named from the setup that ran, so only where it ran
    old = pd.DataFrame({"backend": ["MATH", "MATH", "MATH"], "compile": ["off", "on", "off"],
                        "swaps": ["none", "none", None], "status": ["ok", "ok", "unsupported"]})
    assert recipe_names(old) == ["stock", "compile", None]


def test_a_recipe_with_its_own_settings_is_one_line(db):
    res = runner.invoke(app, ["llama", *CPU, "--recipe", "fast", "--compile", "on", "--db", str(db)])
    assert res.exit_code == 2 and "--recipe sets --compile itself" in res.output
    res = runner.invoke(app, ["llama", *CPU, "--recipe", "fastest", "--db", str(db)])
    assert res.exit_code == 2 and "valid choices: stock, compile, liger" in res.output


def test_the_markov_language_is_the_same_for_every_recipe_and_has_its_structure():
    a = parity.markov_batches(vocab=1000, batch=3, seq=40, steps=5)
    b = parity.markov_batches(vocab=1000, batch=3, seq=40, steps=5)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)) and a[0].shape == (3, 41)
    tokens = torch.cat(a)
    assert int(tokens.max()) < parity.LANGUAGE_TOKENS
    pairs = pd.DataFrame({"a": tokens[:, :-1].flatten(), "b": tokens[:, 1:].flatten()})
    assert pairs.groupby("a").b.nunique().max() <= parity.SUCCESSORS  # each token has its few successors


def record(recipe, curve, run=1):
    return Record("parity", {"recipe": recipe, "run": run}, "ok", {"loss_curve": ",".join(map(str, curve))})


def test_the_parity_table_gives_each_recipe_s_deviation_from_stock_and_no_verdict():
    stock = [5.0 - 0.1 * i for i in range(20)]
    close = [x * 1.01 for x in stock]
    far = stock[:3] + [x * 1.2 for x in stock[3:]]
    losses = parity.curves([record("stock", stock), record("fast", close), record("fp8", far)])
    table = parity.parity_table(losses).set_index("recipe")
    assert pd.isna(table.loc["stock", "max_rel_dev"])  # the reference, one run
    assert table.loc["fast", "max_rel_dev"] == pytest.approx(0.01)
    assert table.loc["fp8", "max_rel_dev"] == pytest.approx(0.2)
    assert table.loc["fp8", "final_rel_dev"] == pytest.approx(0.2)  # it ends 20% above stock
    assert "parity" not in table  # the verdict is stock's band's (test_parity_band.py)


def test_parity_trains_each_recipe_on_its_own_attention(monkeypatch):
    from trainperf.core.errors import Unsupported

    seen = []

    def chosen(step, backend, kv_heads="native"):
        seen.append((backend, kv_heads))
        raise Unsupported("stop before training")

    monkeypatch.setattr(parity, "choose_kv_mode", chosen)
    for recipe in ("fa4", "stock"):
        spec = parity.ParitySpec(recipe=recipe, model="tiny", batch=1, seq=8, train_steps=1, lr=1e-3,
                                 dtype="fp32", sdpa_backend="MATH", device="cpu")
        with pytest.raises(Unsupported, match="stop before training"):
            parity.measure_parity(spec)
    assert seen == [("FA4", "native"), ("MATH", "native")]  # fa4 names its attention; stock takes the asked


def test_a_packed_step_is_checked_for_the_op_its_attention_registers():
    import trainperf.attention.fa4_packed  # noqa: F401  (registers the op)
    from trainperf.models import hf_llama

    name = hf_llama.attention_op("FA4", "packed")
    assert getattr(torch.ops.trainperf, name.split("::")[1]) is not None
    assert hf_llama.attention_op("FA4", "native") == "trainperf::fa4_attention"


def test_a_recipe_s_deviation_is_its_worst_run_s():
    stock = [5.0 - 0.1 * i for i in range(20)]
    wobble = [x * 1.002 for x in stock]  # stock's second run: what nondeterminism alone gives
    close = [x * 1.01 for x in stock]
    far = wobble[:3] + [x * 1.2 for x in wobble[3:]]
    losses = parity.curves([record("stock", stock), record("fp8", close), record("fast", close),
                            record("stock", wobble, run=2), record("fp8", far, run=2),
                            record("fast", [x * 1.01 for x in wobble], run=2)])
    assert list(losses) == ["stock", "fp8", "fast", "stock #2", "fp8 #2", "fast #2"]
    table = parity.parity_table(losses).set_index("recipe")
    assert list(table.index) == ["stock", "fp8", "fast"] and set(table.runs) == {2}
    assert table.loc["fp8", "max_rel_dev"] == pytest.approx(0.2)  # the worst run
    assert table.loc["fast", "max_rel_dev"] == pytest.approx(0.01)  # each run beside stock's of its number
    assert table.loc["stock", "max_rel_dev"] == pytest.approx(0.002)  # the reference's own spread
    assert parity.deviation_text(table.loc["fp8"]) == "20.00% (worst of 2 runs)"
    assert parity.deviation_text(table.loc["stock"]) == "0.20% (worst of 2 runs)"
    one = parity.parity_table(parity.curves([record("stock", stock), record("fast", close)]))
    assert parity.deviation_text(one.set_index("recipe").loc["fast"]) == "1.00%"
    assert parity.deviation_text(one.set_index("recipe").loc["stock"]) == "reference"
    lone = parity.parity_table(parity.curves([record("stock", stock), record("fast", close, run=2)]))
    assert parity.deviation_text(lone.set_index("recipe").loc["fast"]) == "no reference"


def test_the_parity_plot_sets_each_run_beside_stock_s_run_of_its_number(tmp_path):
    stock = [5.0 - 0.1 * i for i in range(20)]
    losses = parity.curves([record("stock", stock), record("fast", [x * 1.01 for x in stock]),
                            record("stock", [x * 1.002 for x in stock], run=2),
                            record("fast", [x * 1.002 * 1.05 for x in stock], run=2)])
    fig = parity.plot_parity(losses, tmp_path / "p.png")
    left, right = fig.axes[:2]
    assert len(left.lines) == 4  # every run's loss
    peaks = sorted(round(float(max(line.get_ydata())), 3) for line in right.lines)
    assert peaks == [0.2, 1.0, 5.0]  # % from stock: stock #2 from stock, fast and fast #2 from their own
    assert (tmp_path / "p.png").stat().st_size > 0


def test_the_parity_suite_headline_sets_each_draw_beside_stock_s_of_that_draw(tmp_path):
    from trainperf.suites.catalog import draws_headline

    stock = {1: [5.0 - 0.1 * i for i in range(20)], 2: [6.0 - 0.2 * i for i in range(20)]}
    runs = [record("stock", stock[1]), record("fast", [x * 1.01 for x in stock[1]]),
            record("fp8", [x * 1.2 for x in stock[1]]), record("stock", stock[2], run=2),
            record("fast", [x * 1.02 for x in stock[2]], run=2), record("fp8", stock[2], run=2)]
    for r in runs:
        r.spec["draw"] = r.spec["run"]
    parity.curves(runs).to_csv(tmp_path / "parity_losses.csv")
    rows = [{"recipe": r.spec["recipe"], "run": r.spec["run"], "draw": r.spec["draw"], "status": "ok"}
            for r in runs]
    rows += [{"recipe": "liger", "run": n, "draw": n, "status": "unsupported"} for n in (1, 2)]
    pd.DataFrame(rows).to_csv(tmp_path / "parity.csv", index=False)
    table = draws_headline({"parity": tmp_path}).set_index("recipe")
    assert list(table.columns) == ["draw 1", "draw 2"]  # no band file: deviations, no verdict
    assert table.loc["fast"].tolist() == ["1.00%", "2.00%"]  # each beside its own draw's stock
    assert table.loc["fp8"].tolist() == ["20.00%", "0.00%"]
    assert table.loc["liger"].tolist() == ["unsupported", "unsupported"]
    assert "stock" not in table.index  # the reference, one run a draw


def test_the_deviation_counts_draws_where_runs_trained_on_several():
    stock = [5.0 - 0.1 * i for i in range(20)]
    runs = [record(name, curve, run=n) for n in (1, 2, 3, 4)
            for name, curve in (("stock", stock), ("fp8", [x * (1.2 if n == 3 else 1.01) for x in stock]))]
    losses = parity.curves(runs)
    losses.attrs["first_runs"] = {1: 1, 2: 2, 3: 3, 4: 4}  # one run a draw
    row = parity.parity_table(losses).set_index("recipe").loc["fp8"]
    assert (row.runs, row.draws) == (4, 4)
    assert parity.deviation_text(row) == "20.00% (worst of 4 draws)"
    losses.attrs["first_runs"] = {1: 1, 2: 1, 3: 3, 4: 3}  # two runs of each of two draws
    row = parity.parity_table(losses).set_index("recipe").loc["fp8"]
    assert parity.deviation_text(row) == "20.00% (worst of 4 runs of 2 draws)"


@pytest.mark.parametrize("option", ["--repeats", "--draws"])
def test_parity_repeats_and_draws_must_be_positive(db, tmp_path, option):
    res = runner.invoke(app, ["parity", *CPU, option, "0", "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code != 0 and f"{option} must be positive, got 0" in res.output


def test_parity_draws_train_each_recipe_on_another_language_beside_stock_s_of_the_same_draw(db, tmp_path):
    res = runner.invoke(app, ["parity", *CPU, "--recipe", "fast", "--train-steps", "5", "--seq", "16",
                              "--batch", "2", "--dtype", "fp32", "--draws", "2", "--db", str(db),
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    recs = {(r.spec["recipe"], r.spec["run"], r.spec["draw"]) for r in Store(db).records(workload="parity")}
    assert recs == {("stock", 1, 1), ("fast", 1, 1), ("stock", 2, 2), ("fast", 2, 2)}
    losses = pd.read_csv(tmp_path / "parity_losses.csv", index_col="step")
    assert losses.stock.iloc[0] == pytest.approx(losses["stock #2"].iloc[0], rel=0.05)  # the same start
    assert (losses.stock - losses["stock #2"]).abs().max() > 1e-3  # other batches after
    table = pd.read_csv(tmp_path / "parity_table.csv").set_index("recipe")
    # each draw of fast beside stock's of the same draw: the CPU's kernels keep fast on stock's curve
    assert table.loc["fast", "runs"] == 2 and table.loc["fast", "max_rel_dev"] < 1e-4
    assert table.loc["fast", "draws"] == 2
    # stock's runs are one a draw: none is set beside another draw's
    assert table.loc["stock", "runs"] == 2 and pd.isna(table.loc["stock", "max_rel_dev"])
    a, b = (parity.markov_batches(512, 2, 8, 1, seed=s)[0] for s in (0, 1))
    assert not torch.equal(a, b) and a.max() < parity.LANGUAGE_TOKENS


def test_parity_cli_trains_each_recipe_from_the_same_start(db, tmp_path):
    res = runner.invoke(app, ["parity", *CPU, "--recipe", "fast", "--train-steps", "6", "--seq", "16",
                              "--batch", "2", "--dtype", "fp32", "--repeats", "2", "--stock-seeds", "2",
                              "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    stored = Store(db).records(workload="parity")
    recs = {(r.spec["recipe"], r.spec["run"], r.spec["seed"]): r for r in stored}
    assert set(recs) == {("stock", 1, 0), ("fast", 1, 0), ("stock", 2, 0), ("fast", 2, 0),
                         ("stock", 1, 1)}  # stock is the reference, and from another seed its band
    curves = parity.curves(list(recs.values()))
    assert curves["fast #2"].tolist() == curves.fast.tolist()  # the CPU's kernels are deterministic
    assert len(curves) == 6 and curves.stock.iloc[-1] < curves.stock.iloc[0]  # it learns
    assert curves.fast.iloc[0] == pytest.approx(curves.stock.iloc[0], rel=1e-5)  # the same start
    table = pd.read_csv(tmp_path / "parity_table.csv").set_index("recipe")
    assert table.loc["fast", "runs"] == 2 and table.loc["fast", "max_rel_dev"] < 0.05
    assert table.loc["stock", "max_rel_dev"] == 0
    assert (tmp_path / "parity_losses.png").exists()
    judged = pd.read_csv(tmp_path / "parity_band.csv")
    assert sorted(zip(judged.recipe, judged.run, strict=True)) == [("fast", 1), ("fast", 2), ("stock", 2)]
    assert (judged.seeds == 2).all() and judged.verdict.notna().all()


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", [r for r in RECIPES if r != "stock"])
def test_each_recipe_s_first_loss_and_gradients_match_stock(recipe):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    needs = {"liger": ("liger_kernel",), "liger-compile": ("liger_kernel",),
             "fa4": ("flash_attn.cute",), "liger-fa4": ("liger_kernel", "flash_attn.cute"),
             **{r: ("torchao",) for r, setup in RECIPES.items()
                if setup.get("float8", "").startswith("torchao")}}
    for package in needs.get(recipe, ()):
        pytest.importorskip(package)

    def first(setup):
        spec = setup_spec(setup, "CUDNN_ATTENTION", batch=2, seq=256, dtype="bf16", optimizer="none",
                          inputs="ids", model="llama-3.2-1b", layers=2, device="cuda")
        step = LlamaStep(spec, torch.device("cuda"))
        try:
            loss = step()
            grads = {n: p.grad.float().norm().item() for n, p in step.model.named_parameters()
                     if p.grad is not None and "layers.1.mlp.down_proj" in n}
            return loss.item(), grads
        finally:
            step.close()

    ref_loss, ref_grads = first({})
    loss, grads = first(recipe_setup(recipe, "cuda"))
    assert loss == pytest.approx(ref_loss, rel=2e-2)
    assert grads.keys() == ref_grads.keys() and grads
    for name, norm in grads.items():  # float8's GEMMs round more, bf16 ones about alike
        assert norm == pytest.approx(ref_grads[name], rel=0.1 if recipe.startswith("fp8") else 3e-2), name


def test_profile_llama_takes_a_recipe_and_names_a_missing_package(tmp_path, monkeypatch):
    from trainperf.attention import fa4

    monkeypatch.setattr(fa4, "_INSTALLED", False)
    profile = ["profile", "llama", "--device", "cpu", "--out", str(tmp_path)]
    res = runner.invoke(app, [*profile, "--recipe", "fa4"])
    assert res.exit_code == 2 and "unsupported here" in res.output and "trainperf[fa4]" in res.output
    res = runner.invoke(app, ["profile", "llama", "--device", "cpu", "--recipe", "liger", "--fast"])
    assert res.exit_code == 2 and "give one of --fast and --recipe liger" in res.output
    res = runner.invoke(app, [*profile, "--recipe", "fast"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "profile_llama_math_1x64_loss-chunked_compile-layers.json").exists()


def test_kernels_are_sorted_into_kinds_by_name():
    from trainperf.profiling.kernel_kinds import kernel_kind, time_by_kind

    names = {"cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16": "attention",
             "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90": "attention",
             "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT": "matmul",
             "triton_poi_fused_add_mul_3": "triton", "_rms_norm_backward_kernel": "triton",
             "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add>": "other"}
    assert {name: kernel_kind(name) for name in names} == names
    kernels = pd.DataFrame({"kernel": ["nvjet_a", "nvjet_b", "void at::native::copy<x>"],
                            "total_ms": [2.0, 3.0, 1.5]})
    assert time_by_kind(kernels).to_dict() == {"attention": 0.0, "matmul": 5.0, "triton": 0.0, "other": 1.5}


def explain_profiles(tmp_path):
    """Two recipes' profile folders as the peers-explain suite's parts leave them, and one that never ran."""
    from trainperf.profiling.breakdown import Breakdown
    from trainperf.profiling.session import save_breakdown

    def profile(name, phases, kernels):
        folder = tmp_path / f"profile-{name}"
        folder.mkdir()
        ranges = pd.DataFrame({"range": list(phases), "calls": 1, "kernels": 1,
                               "kernel_ms": list(phases.values()), "share": 0.0})
        table = pd.DataFrame({"kernel": list(kernels), "count": 1, "total_ms": list(kernels.values()),
                              "mean_us": 0.0, "share": 0.0})
        save_breakdown(Breakdown(ranges, table, 0.0, sum(kernels.values()), 0), folder / name, {})
        return folder

    return {"profile-stock": profile("stock", {"fwd": 4.0, "bwd": 8.0, "optimizer": 1.0},
                                     {"nvjet_a": 6.0, "void at::native::add<x>": 6.0}),
            "profile-fast": profile("fast", {"fwd": 2.0, "bwd": 4.0},
                                    {"nvjet_a": 6.0, "triton_poi_fused_1": 2.0}),
            "profile-missing": tmp_path / "never-ran"}


def test_the_explain_headline_sets_each_recipe_s_kinds_and_phases_against_stock(tmp_path):
    from trainperf.suites.catalog import explain_headline

    table = explain_headline(explain_profiles(tmp_path)).set_index("kernels")
    assert list(table.columns) == ["stock", "fast"]
    assert table.loc["other", "fast"] == "0.0" and table.loc["other", "stock"] == "6.0 (1.00x)"
    assert table.loc["total", "fast"] == "8.0 (1.50x)"
    assert table.loc["bwd range", "fast"] == "4.0 (2.00x)"
    assert table.loc["optimizer range", "fast"] == ""  # a phase the profile does not have


def test_the_explain_report_shows_each_recipe_s_time_stacked_by_kind_first(tmp_path):
    from trainperf.suites.page import write_report

    parts = explain_profiles(tmp_path)
    (tmp_path / "profile-fast" / "breakdown.png").write_bytes(b"")  # a part's own plot comes after
    meta = {"suite": "peers-explain", "parts": [{"name": name} for name in parts]}
    (tmp_path / "suite.json").write_text(json.dumps(meta))
    write_report(tmp_path)
    plot = tmp_path / "kernel_time_by_kind.png"
    assert plot.read_bytes().startswith(b"\x89PNG")
    shown = [line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("![")]
    assert shown == ["![kernel_time_by_kind](kernel_time_by_kind.png)",
                     "![breakdown](profile-fast/breakdown.png)"]


def test_stacked_bars_stack_each_row_s_columns_and_label_its_end(tmp_path):
    from trainperf.core.plots import stacked_bars

    df = pd.DataFrame({"matmul": [6.0, 6.0], "other": [6.0, 2.0]}, index=["stock", "fast"])
    fig = stacked_bars(df, tmp_path / "bars.png", "ms", labels={"stock": "12 ms", "fast": "8 ms (1.50x)"})
    ax = fig.axes[0]
    ends = {ax.get_yticklabels()[round(b.get_y() + b.get_height() / 2)].get_text(): b.get_x() + b.get_width()
            for b in ax.patches}
    assert ends == {"stock": 12.0, "fast": 8.0}  # each row's last segment ends at its total
    labels = {t.get_text().strip(): t.get_position()[0] for t in ax.texts}
    assert labels == {"12 ms": 12.0, "8 ms (1.50x)": 8.0}


def test_the_fastest_step_is_set_against_the_best_peer_of_each_shape():
    from trainperf.suites.catalog import _against_best

    ok = pd.DataFrame({"case": ["1x8"] * 4 + ["2x4"] * 2,
                       "recipe": ["stock", "liger", "compile", "fast", "liger", "fast"],
                       "mean_s": [1.0, 0.8, 0.9, 0.5, 0.4, 0.5], "peak_mem_gb": [10, 4.0, 6, 5.0, 4.0, 2.0]})
    row = _against_best(ok, "fast", ("liger", "compile"))
    assert row["1x8"] == "1.60x over liger (memory 1.25x)"
    assert row["2x4"] == "0.80x over liger (memory 0.50x)"  # slower than the peer: said so, not hidden


def test_the_fastest_step_s_speed_up_carries_its_standard_error_where_the_rows_have_their_spread():
    from trainperf.suites.catalog import _against_best

    ok = pd.DataFrame({"case": ["1x8"] * 2 + ["2x4"] * 2, "recipe": ["liger", "fast"] * 2,
                       "mean_s": [0.8, 0.5] * 2, "peak_mem_gb": [4.0, 5.0] * 2,
                       "std_s": [0.024, 0.02, 0.024, 0.02], "iters": [10, 10, None, 10]})
    row = _against_best(ok, "fast", ("liger",))
    se = 1.6 * math.sqrt(0.03 ** 2 / 10 + 0.04 ** 2 / 10)  # the rows' spreads relative to their means
    assert row["1x8"] == f"1.600x ± {se:.3f} over liger (memory 1.25x)" and f"{se:.3f}" == "0.025"
    assert row["2x4"] == "1.60x over liger (memory 1.25x)"  # the peer's count unknown: no error made up


def test_a_fastest_step_set_against_a_peer_measured_on_another_gpu_says_so():
    from trainperf.suites.catalog import _against_best

    ok = pd.DataFrame({"case": ["1x8"] * 2 + ["2x4"] * 2 + ["4x2"] * 2,
                       "recipe": ["liger", "fast"] * 3, "mean_s": [0.8, 0.5] * 3,
                       "peak_mem_gb": [4.0, 5.0] * 3,
                       "gpu_uuid": ["GPU-a", "GPU-a", "GPU-a", "GPU-b", None, "GPU-b"]})
    row = _against_best(ok, "fast", ("liger",))
    assert row["1x8"] == "1.60x over liger (memory 1.25x)"
    assert row["2x4"] == "1.60x over liger (memory 1.25x; on two different GPUs)"
    assert row["4x2"] == "1.60x over liger (memory 1.25x)"  # a row without its GPU named: nothing to tell


def test_the_fastest_step_takes_fa4_and_quack_only_where_they_run(monkeypatch):
    from trainperf.attention import fa4
    from trainperf.kernels import quack_gemm, quack_mlp
    from trainperf.workloads.llama_sdpa import FAST

    assert recipe_setup("fast", "cpu") == FAST  # neither on the CPU: the backend asked for, stock MLP
    assert recipe_setup("fa4", "cpu") == {"sdpa_backend": "FA4"}  # a recipe that names it keeps it
    monkeypatch.setattr(fa4, "fa4_runs", lambda device: True)
    monkeypatch.setattr(quack_mlp, "quack_runs", lambda device: False)
    graphed = {**FAST, "sdpa_backend": "FA4", "graph": "step"}
    assert recipe_setup("fast", "cuda") == graphed
    monkeypatch.setattr(fa4, "fa4_runs", lambda device: False)  # PyTorch's SDPA reads the mask: no graph
    assert recipe_setup("fast", "cuda") == FAST
    monkeypatch.setattr(fa4, "fa4_runs", lambda device: True)
    monkeypatch.setattr(quack_mlp, "quack_runs", lambda device: True)
    monkeypatch.setattr(quack_gemm, "tuned_here", lambda device: False)
    assert recipe_setup("fast", "cuda") == {**graphed, "swiglu": "quack"}  # no tuned GEMMs known here
    monkeypatch.setattr(quack_gemm, "tuned_here", lambda device: True)
    assert recipe_setup("fast", "cuda") == {**graphed, "swiglu": "quack", "gemm": "quack"}
    assert recipe_setup("fp8-trainperf", "cuda") == {**graphed, "float8": "trainperf", "gemm": "quack"}
    assert recipe_setup("fp8-trainperf-all", "cuda") == {**graphed, "float8": "trainperf-all",
                                                         "gemm": "quack"}
    assert recipe_setup("fp8-trainperf-head", "cuda") == {**graphed, "float8": "trainperf-head"}
    # its own attention reads nothing on the host either: graphed as FA4's recipes are
    assert recipe_setup("fp8-trainperf-attn", "cuda") == {**graphed, "float8": "trainperf-all",
                                                          "gemm": "quack", "sdpa_backend": "CUDNN_FP8"}
    assert "graph" not in recipe_setup("fp8-trainperf-attn", "cuda", replayed=False)
    assert "graph" not in recipe_setup("fp8-trainperf-attn", "cpu")
    assert "gemm" not in recipe_setup("fp8", "cuda")  # torchao's float8 has the projections
    monkeypatch.setattr(quack_gemm, "tuned_here", lambda device: False)
    assert "swiglu" not in recipe_setup("fp8", "cuda")  # its MLP GEMMs are float8 ones
    assert "gemm" not in recipe_setup("fp8-trainperf", "cuda")
    assert recipe_setup("liger", "cuda") == RECIPES["liger"]  # peers run as users run them: no graph
    # profiles and parity launch the iteration themselves: the same setup, without the graph
    assert recipe_setup("fast", "cuda", replayed=False) == {**FAST, "sdpa_backend": "FA4", "swiglu": "quack"}


@pytest.mark.parametrize("fa4_runs", [False, True])
@pytest.mark.parametrize("quack_runs", [False, True])
def test_every_setup_a_recipe_takes_is_one_of_its_forms(monkeypatch, fa4_runs, quack_runs):
    """The suites' tables name a row's recipe by its forms: each setup that recipe_setup gives
    must be one of them, its attention aside."""
    from trainperf.attention import fa4
    from trainperf.kernels import quack_gemm, quack_mlp
    from trainperf.workloads.llama_sdpa import recipe_forms

    monkeypatch.setattr(fa4, "fa4_runs", lambda device: fa4_runs)
    monkeypatch.setattr(quack_mlp, "quack_runs", lambda device: quack_runs)
    monkeypatch.setattr(quack_gemm, "tuned_here", lambda device: quack_runs)
    for name in RECIPES:
        for replayed in (False, True):
            for seq in (None, 768, 8192):
                setup = recipe_setup(name, "cuda", replayed=replayed, seq=seq)
                if "sdpa_backend" not in RECIPES[name]:  # the attention it takes where FA4 runs
                    setup.pop("sdpa_backend", None)
                assert setup in recipe_forms(name), (name, setup)


def test_the_fastest_step_packs_k_v_heads_on_fa4_up_to_its_sequence_limit_only(monkeypatch):
    from trainperf.attention import fa4
    from trainperf.core.errors import SpecError
    from trainperf.workloads.llama_sdpa import PACKED_UP_TO_SEQ, with_kv_heads

    monkeypatch.setattr(fa4, "fa4_runs", lambda device: True)
    assert recipe_setup("fast", "cuda", seq=PACKED_UP_TO_SEQ)["kv_heads"] == "packed"
    assert "kv_heads" not in recipe_setup("fast", "cuda", seq=PACKED_UP_TO_SEQ + 1)
    assert "kv_heads" not in recipe_setup("fast", "cuda")  # no sequence named: as it runs anywhere
    assert "kv_heads" not in recipe_setup("fp8", "cuda", seq=768)
    assert "kv_heads" not in recipe_setup("fa4", "cuda", seq=768)  # peers run as users run them
    monkeypatch.setattr(fa4, "fa4_runs", lambda device: False)
    assert "kv_heads" not in recipe_setup("fast", "cuda", seq=768)  # packing needs FA4
    packed, plain = {"kv_heads": "packed"}, {"compile": "on"}
    assert with_kv_heads(plain, "expanded") == {"compile": "on", "kv_heads": "expanded"}
    assert with_kv_heads(packed, "native") == packed  # the default leaves it to the recipe
    with pytest.raises(SpecError, match="sets --kv-heads packed itself at sequences up to 1024"):
        with_kv_heads(packed, "expanded")


def test_a_cuda_graph_is_refused_where_it_cannot_capture():
    from trainperf.core.errors import SpecError
    from trainperf.workloads.llama_sdpa import validate

    spec = setup_spec({**RECIPES["fast"], "graph": "step"}, "MATH", batch=1, seq=8, model="tiny",
                      device="cpu")
    with pytest.raises(SpecError, match="graph=step replays a CUDA graph: it needs a CUDA GPU, not cpu"):
        validate(spec)
    with pytest.raises(SpecError, match="graph"):
        validate(setup_spec({"graph": "always"}, "MATH", batch=1, seq=8, model="tiny", device="cpu"))
    with pytest.raises(SpecError, match="reads the attention mask on the host"):
        validate(setup_spec({"graph": "step"}, "CUDNN_ATTENTION", batch=1, seq=8, model="tiny",
                            device="cuda"))
    with pytest.raises(SpecError, match="the only inputs it was captured from here"):
        validate(setup_spec({"graph": "step"}, "FA4", batch=1, seq=8, model="tiny", device="cuda",
                            inputs="ids"))


def test_a_suite_part_whose_package_is_missing_is_left_out_and_said(tmp_path, monkeypatch):
    from trainperf.suites import runner as suite_runner
    from trainperf.suites.catalog import SUITES

    said = []
    monkeypatch.setattr(suite_runner, "find_spec", lambda name: None if name == "liger_kernel" else object())
    folder = suite_runner.run_suite(SUITES["peers-explain"], tmp_path / "r", tmp_path / "r.db",
                                    invoke=lambda argv: 0, say=said.append)
    parts = {p["name"]: p for p in json.loads((folder / "suite.json").read_text())["parts"]}
    assert parts["profile-liger"]["left_out"] == "needs the liger_kernel package"
    assert "left_out" not in parts["profile-stock"]
    assert any("profile-liger: left out" in line for line in said)


def test_the_peers_headline_names_each_recipe_s_rows_in_every_form_it_runs(tmp_path):
    from trainperf.suites.catalog import peers_headline

    (tmp_path / "llama").mkdir()
    pd.DataFrame({"backend": ["CUDNN_ATTENTION", "CUDNN_ATTENTION", "FA4", "FA4", "FA4", "FA4"],
                  "compile": ["off", "off", "layers", "layers", "layers", "layers"],
                  "swaps": [None, "library=liger", "loss=chunked", "swiglu=quack,loss=chunked",
                            "swiglu=quack,loss=chunked,graph=step",
                            "swiglu=quack,loss=chunked,kv=packed,graph=step"],
                  "batch_size": [1, 1, 1, 2, 4, 8], "seq_len": [8, 8, 8, 4, 2, 1],
                  "mean_s": [1.0, 0.8, 0.5, 0.4, 0.3, 0.2],
                  "peak_mem_gb": [10.0, 4.0, 5.0, 3.0, 2.0, 1.0],
                  "energy_j_per_iter": [700.0, 560.0, 349.6, None, 200.0, 100.0], "status": ["ok"] * 6},
                 ).to_csv(tmp_path / "llama" / "training_timing.csv", index=False)
    table = peers_headline({"llama": tmp_path / "llama"}).set_index("recipe")
    assert set(table.index) >= {"stock", "liger", "fast"} and None not in table.index
    assert table.loc["fast", "1x8"] == "0.5 (5.0 GB, 350 J)"
    assert table.loc["fast", "2x4"] == "0.4 (3.0 GB)"  # with quack's MLP; no energy read: the memory alone
    assert table.loc["fast", "4x2"] == "0.3 (2.0 GB, 200 J)"  # replayed as a CUDA graph as well
    assert table.loc["fast", "8x1"] == "0.2 (1.0 GB, 100 J)"  # and with its K/V heads packed
    against = table.loc["fast vs the best of compile, liger, liger-compile"]
    assert against["1x8"] == "1.60x over liger (memory 1.25x; energy 0.62x)"


def test_the_peers_headline_reads_results_from_before_energy_was_read(tmp_path):
    from trainperf.suites.catalog import peers_headline

    (tmp_path / "llama").mkdir()
    pd.DataFrame({"backend": ["CUDNN_ATTENTION"], "compile": ["off"], "swaps": [None], "batch_size": [1],
                  "seq_len": [8], "mean_s": [1.0], "peak_mem_gb": [10.0], "status": ["ok"]},
                 ).to_csv(tmp_path / "llama" / "training_timing.csv", index=False)
    table = peers_headline({"llama": tmp_path / "llama"}).set_index("recipe")
    assert table.loc["stock", "1x8"] == "1 (10.0 GB)"


def test_the_float8_headline_sets_trainperf_s_float8_against_torchao_s_and_bf16(tmp_path):
    from trainperf.suites.catalog import float8_headline

    (tmp_path / "llama").mkdir()
    rows = pd.DataFrame({"backend": ["FA4"] * 5, "compile": ["layers", "layers", "layers-tuned", "layers",
                                                             "layers"],
                         "swaps": ["swiglu=quack,loss=chunked,graph=step",
                                   "loss=chunked,float8=trainperf-all,graph=step",
                                   "loss=chunked,float8=torchao,graph=step",
                                   "loss=chunked,float8=trainperf,graph=step",
                                   "loss=chunked,float8=trainperf-head,graph=step"],
                         "batch_size": [1] * 5, "seq_len": [8] * 5, "mean_s": [0.32, 0.28, 0.30, 0.29, 0.26],
                         "peak_mem_gb": [21.0, 23.1, 19.0, 23.0, 26.2], "status": ["ok"] * 5})
    rows.to_csv(tmp_path / "llama" / "training_timing.csv", index=False)
    table = float8_headline({"llama": tmp_path / "llama"}).set_index("recipe")
    assert table.loc["fp8-trainperf-all", "1x8"] == "0.28 (23.1 GB)"
    assert table.loc["fp8", "1x8"] == "0.3 (19.0 GB)"
    assert table.loc["fp8-trainperf-all vs the best of fp8", "1x8"] == "1.07x over fp8 (memory 1.22x)"
    assert table.loc["fp8-trainperf-all vs the best of fast", "1x8"] == "1.14x over fast (memory 1.10x)"
    # what the LM head's float8 products bring, against the decoder's alone
    assert table.loc["fp8-trainperf-head vs the best of fp8", "1x8"] == "1.15x over fp8 (memory 1.38x)"
    assert table.loc["fp8-trainperf-head vs the best of fp8-trainperf-all", "1x8"] == \
        "1.08x over fp8-trainperf-all (memory 1.13x)"
    assert table.loc["fp8-trainperf", "1x8"] == "0.29 (23.0 GB)"
    assert table.loc["fp8-trainperf vs the best of fp8", "1x8"] == "1.03x over fp8 (memory 1.21x)"
    # a run without the wider float8 steps compares the MLP's alone, and nothing more
    rows.iloc[[0, 2, 3]].to_csv(tmp_path / "llama" / "training_timing.csv", index=False)
    table = float8_headline({"llama": tmp_path / "llama"}).set_index("recipe")
    assert sorted(i for i in table.index if " vs " in i) == ["fp8-trainperf vs the best of fp8"]
    # a run whose every case failed (an error row records no swaps) has no row to compare
    nothing = {"mean_s": float("nan"), "peak_mem_gb": float("nan"), "swaps": None, "status": "error"}
    rows.assign(**nothing).to_csv(tmp_path / "llama" / "training_timing.csv", index=False)
    assert float8_headline({"llama": tmp_path / "llama"}).empty


def test_fields_given_beside_a_recipe_override_its_own_attention():
    """Probes build a recipe's step with some of its fields changed, its attention among them."""
    setup = {"sdpa_backend": "FA4", "loss": "chunked"}
    assert setup_spec(setup, "CUDNN_ATTENTION", batch=1, seq=8).sdpa_backend == "FA4"
    spec = setup_spec(setup, "CUDNN_ATTENTION", batch=1, seq=8, sdpa_backend="CUDNN_FE")
    assert (spec.sdpa_backend, spec.loss) == ("CUDNN_FE", "chunked")


def test_the_fastest_step_s_energy_is_set_against_the_best_peer_s_where_both_were_read():
    """Under the power cap time follows energy: the row says how much less the step took."""
    from trainperf.suites.catalog import _against_best

    ok = pd.DataFrame({"case": ["1x8"] * 2 + ["2x4"] * 2, "recipe": ["liger", "fast"] * 2,
                       "mean_s": [0.8, 0.5] * 2, "peak_mem_gb": [4.0, 5.0] * 2,
                       "energy_j_per_iter": [200.0, 150.0, None, 150.0]})
    row = _against_best(ok, "fast", ("liger",))
    assert row["1x8"] == "1.60x over liger (memory 1.25x; energy 0.75x)"
    assert row["2x4"] == "1.60x over liger (memory 1.25x)"  # the peer's energy unread: no ratio


def test_torchao_s_float8_takes_the_decoder_products_each_choice_names():
    from trainperf.models import hf_llama

    model = hf_llama.build_model(hf_llama.load_config("tiny"), torch.float32, torch.device("cpu"))
    taken = {products: {fqn.rsplit(".", 1)[-1] for fqn, m in model.named_modules()
                        if peers.float8_takes(products)(m, fqn)}
             for products in ("all", "mlp", "attention")}
    assert taken["mlp"] == {"gate_proj", "up_proj", "down_proj"}
    assert taken["attention"] == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert taken["all"] == taken["mlp"] | taken["attention"]  # never the LM head
    assert set(peers.TORCHAO_FLOAT8) <= set(peers.FLOAT8)
