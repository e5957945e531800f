import contextlib
import warnings

import pandas as pd
import pytest
import torch
from conftest import rel_err
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.errors import SpecError
from trainperf.core.plots import grouped_bars
from trainperf.core.record import Record
from trainperf.core.runner import measure_case
from trainperf.core.store import Store
from trainperf.models import hf_llama
from trainperf.workloads import llama_sdpa
from trainperf.workloads.llama_sdpa import CSV_COLUMNS, LlamaSpec, measure_llama, validate

pytest.importorskip("transformers")
runner = CliRunner()

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # Triton swaps need CUDA or the interpreter


def tiny(**kw):
    base = dict(sdpa_backend="MATH", batch=2, seq=32, dtype="fp32", model="tiny", device="cpu",
                warmup=2, iters=2)
    return LlamaSpec(**{**base, **kw})


def test_gqa_expansion_is_numerically_identical_to_the_native_path():
    cfg = hf_llama.load_config("tiny")
    assert cfg.num_key_value_heads < cfg.num_attention_heads
    torch.manual_seed(0)
    model = hf_llama.build_model(cfg, torch.float64, torch.device("cpu"))
    x = torch.randn(2, 24, cfg.hidden_size, dtype=torch.float64)
    mask = torch.ones(2, 24, dtype=torch.long)
    results = []
    for expand in (False, True):
        hf_llama.set_attention(model, hf_llama.attention_name("MATH", expand))
        model.zero_grad()
        logits = model(inputs_embeds=x, attention_mask=mask).logits
        logits.square().mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-12, atol=1e-12)
    for a, b in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_metrics_and_verified_backend():
    m = measure_llama(tiny())
    assert m["iter_s_n"] == 2 and m["iter_s_mean"] > 0
    assert m["kv_heads"] == "native"
    assert "aten::_scaled_dot_product_attention_math" in m["sdpa_ops"]
    assert m["tokens_per_s"] == pytest.approx(64 / m["iter_s_mean"])


def test_energy_per_iteration_is_the_window_energy_over_the_timed_iterations(monkeypatch):
    """And the window's power and the reasons the clock was held down reach the table beside it."""
    class Monitor:  # the GPU's counter took 12 J over the timed window
        def __init__(self, device):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def metrics(self):
            return {"energy_j": 12.0, "power_w": 600.0, "clock_reasons": "power cap 90%"}
    monkeypatch.setattr(llama_sdpa, "GpuMonitor", Monitor)
    spec = tiny(iters=3)
    m = measure_llama(spec)
    assert m["iter_energy_j"] == pytest.approx(4.0)
    table = llama_sdpa.timing_table([Record("llama", spec.__dict__, "ok", m)])
    assert table.energy_j_per_iter.tolist() == pytest.approx([4.0])
    assert table.power_w.tolist() == [600.0] and table.clock_reasons.tolist() == ["power cap 90%"]


def test_kv_heads_expanded_is_recorded_as_asked_and_as_a_swap():
    m = measure_llama(tiny(kv_heads="expanded"))
    assert m["kv_heads"] == "expanded" and "kv=expanded" in m["swaps"]
    assert "kv=expanded" in tiny(kv_heads="expanded").label()


def test_unknown_kv_heads_mode_is_a_spec_error():
    with pytest.raises(SpecError, match="kv-heads"):
        validate(tiny(kv_heads="grouped"))


def test_backend_that_cannot_run_is_an_unsupported_row():
    rec = measure_case("llama", tiny(sdpa_backend="EFFICIENT_ATTENTION"), measure_llama, {"device": "cpu"})
    assert rec.status == "unsupported"
    assert "also with K/V heads expanded" in rec.reason


def test_a_backend_that_silently_fell_back_is_an_error(monkeypatch):
    monkeypatch.setitem(hf_llama.BACKEND_OPS, "MATH", "aten::_scaled_dot_product_cudnn_attention")
    rec = measure_case("llama", tiny(), measure_llama, {"device": "cpu"})
    assert rec.status == "error" and "profiler saw" in rec.reason


def test_oom_is_a_row(monkeypatch):
    def boom(self, phase=None):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB.")
    monkeypatch.setattr(llama_sdpa.LlamaStep, "__call__", boom)
    rec = measure_case("llama", tiny(), measure_llama, {"device": "cpu"})
    assert rec.status == "oom" and rec.metrics["oom_tried_gb"] == 3.0


def test_cli_writes_csv_and_plots(db, tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(app, ["llama", "--model", "tiny", "--batch-seq", "1x32,2x16", "--sdpa-backend",
                              "MATH,FLASH_ATTENTION,EFFICIENT_ATTENTION", "--iters", "2", "--warmup", "2",
                              "--dtype", "fp32", "--device", "cpu", "--db", str(db), "--out", str(out),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(out / "training_timing.csv")
    assert list(df.columns) == CSV_COLUMNS
    assert len(df) == 6
    assert set(df[df.backend == "EFFICIENT_ATTENTION"].status) == {"unsupported"}
    ok = df[df.status == "ok"]
    assert set(ok.backend) == {"MATH", "FLASH_ATTENTION"}
    assert (ok.iters == 2).all()  # the timed iterations behind each mean, for its standard error
    # EFFICIENT could not run, so there is no baseline to divide by
    assert df.speedup.isna().all()
    assert (out / "iteration_time.png").stat().st_size > 0 and (out / "speedup.png").exists()
    assert len(Store(db).records(workload="llama")) == 6


def test_a_stopped_sweep_leaves_the_timing_table_of_its_finished_cases(db, tmp_path, monkeypatch):
    """What a suite's headline reads (training_timing.csv) is there for a part cut short too."""
    calls = []

    def second_is_stopped(spec):
        calls.append(spec)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure_llama(spec)

    monkeypatch.setattr(llama_sdpa, "measure_llama", second_is_stopped)
    out = tmp_path / "out"
    res = runner.invoke(app, ["llama", "--model", "tiny", "--batch-seq", "1x32", "--sdpa-backend",
                              "MATH,FLASH_ATTENTION", "--iters", "2", "--warmup", "1", "--dtype", "fp32",
                              "--device", "cpu", "--db", str(db), "--out", str(out), "--quiet"])
    assert res.exit_code == 130, res.output
    df = pd.read_csv(out / "training_timing.csv")
    assert list(df.columns) == CSV_COLUMNS
    assert list(df.backend) == ["MATH"] and list(df.status) == ["ok"]
    assert not (out / "iteration_time.png").exists()  # no plots of a cut sweep


def test_speedup_is_relative_to_the_baseline(db, tmp_path):
    res = runner.invoke(app, ["llama", "--model", "tiny", "--batch-seq", "1x32", "--sdpa-backend",
                              "MATH,FLASH_ATTENTION", "--baseline", "MATH", "--iters", "2", "--dtype", "fp32",
                              "--device", "cpu", "--db", str(db), "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "training_timing.csv").set_index("backend")
    assert df.loc["MATH", "speedup"] == pytest.approx(1.0)
    assert df.loc["FLASH_ATTENTION", "speedup"] == pytest.approx(df.loc["MATH", "mean_s"]
                                                                 / df.loc["FLASH_ATTENTION", "mean_s"])


def test_iteration_plot_has_one_series_per_backend(tmp_path):
    df = pd.DataFrame({"case": ["1x8", "1x8", "2x4", "2x4"], "backend": ["A", "B", "A", "B"],
                       "mean_s": [1.0, 2.0, 3.0, 4.0]})
    fig = grouped_bars(df, "case", "backend", "mean_s", tmp_path / "p.png", "seconds")
    ax = fig.axes[0]
    assert [c.get_label() for c in ax.containers] == ["A", "B"]
    assert [b.get_height() for b in ax.containers[1]] == [2.0, 4.0]
    assert ax.get_ylabel() == "seconds" and [t.get_text() for t in ax.get_xticklabels()] == ["1x8", "2x4"]


@pytest.mark.parametrize("args, message", [
    (["--sdpa-backend", "TURBO"], "valid choices: CUDNN_ATTENTION"),
    (["--batch-seq", "1x0"], "--batch-seq: 0 is not an integer from 1 to 2,147,483,647"),
    (["--model", "llama-99b"],
     "not a preset (llama-3.2-1b, llama-3.1-8b, tiny, qwen2.5-1.5b, qwen2.5-7b, gemma-2-2b)"),
    (["--model", "/nonexistent/config.json"], "an existing config.json or model folder"),
    (["--graph", "always"], "valid choices: off, step"),
    (["--graph", "step"], "graph=step replays a CUDA graph: it needs a CUDA GPU, not cpu"),
    (["--graph", "step", "--recipe", "stock"], "--recipe sets --graph itself"),
])
def test_bad_llama_input(db, args, message):
    res = runner.invoke(app, ["llama", "--device", "cpu", "--db", str(db), *args])
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_llama_with_trainperf_swaps_matches_the_stock_model():
    pytest.importorskip("triton")
    cfg = hf_llama.load_config("tiny")
    torch.manual_seed(0)
    stock = hf_llama.build_model(cfg, torch.float32, torch.device(DEVICE))
    torch.manual_seed(0)
    fast = hf_llama.build_model(cfg, torch.float32, torch.device(DEVICE))
    assert hf_llama.apply_swaps(fast, norm="triton", swiglu="triton", rope="triton") == [
        "norm=triton", "swiglu=triton", "rope=triton"]
    assert "Triton" in type(fast.model.norm).__name__
    for m in (stock, fast):
        hf_llama.set_attention(m, hf_llama.attention_name("MATH", False))
    x = torch.randn(2, 24, cfg.hidden_size, device=DEVICE)
    mask = torch.ones(2, 24, dtype=torch.long, device=DEVICE)
    targets = torch.randint(0, cfg.vocab_size, (2, 24), device=DEVICE)
    logits = stock(inputs_embeds=x, attention_mask=mask).logits
    ref = torch.nn.functional.cross_entropy(logits.view(-1, cfg.vocab_size), targets.view(-1))
    hidden = fast.model(inputs_embeds=x, attention_mask=mask).last_hidden_state
    from trainperf.kernels.chunked_loss import chunked_lm_loss
    loss = chunked_lm_loss(hidden, fast.lm_head.weight, targets, chunk=16)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(stock.named_parameters(), torch.autograd.grad(loss, list(fast.parameters())),
                            strict=True):
        ga = torch.autograd.grad(ref, a, retain_graph=True)[0]
        torch.testing.assert_close(b, ga, rtol=1e-4, atol=1e-6, msg=name)


def test_fast_rows_sit_beside_the_stock_rows(db, tmp_path):
    res = runner.invoke(app, ["llama", "--model", "tiny", "--batch-seq", "1x32", "--sdpa-backend", "MATH",
                              "--fast", "--iters", "2", "--dtype", "fp32", "--device", "cpu", "--db", str(db),
                              "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "training_timing.csv")
    assert list(df.status) == ["ok", "ok"] and list(df.backend) == ["MATH", "MATH"]
    stock, fast = df.iloc[0], df.iloc[1]
    assert stock.swaps == "none" and fast.swaps == "loss=chunked"
    assert (stock.compile, fast.compile) == ("off", "layers")
    assert stock.speedup == pytest.approx(1.0)  # the baseline is the stock eager row, not the fast one
    assert fast.speedup == pytest.approx(stock.mean_s / fast.mean_s)
    summary = llama_sdpa.summary_table(df)  # what the terminal shows beside the per-case table
    assert list(summary.columns) == ["shape", "math compiled per layer + loss=chunked speed-up", "math",
                                     "math compiled per layer + loss=chunked"]
    assert summary.attrs["against"] == "the best stock row"
    assert summary.iloc[0, 1] == pytest.approx(fast.vs_best_stock)


def test_fused_norm_swap_matches_transformers_rmsnorm():
    cfg = hf_llama.load_config("tiny")
    models = []
    for norm in ("torch", "fused"):
        torch.manual_seed(0)
        m = hf_llama.build_model(cfg, torch.float32, torch.device("cpu"))
        weight = m.model.norm.weight
        assert hf_llama.apply_swaps(m, norm=norm) == ([] if norm == "torch" else ["norm=fused"])
        assert m.model.norm.weight is weight  # shared, not copied
        hf_llama.set_attention(m, hf_llama.attention_name("MATH", False))
        models.append(m)
    assert type(models[1].model.norm).__name__ == "FusedRMSNorm"
    x = torch.randn(2, 24, cfg.hidden_size)
    outs = [m(inputs_embeds=x).logits for m in models]  # transformers' norm computes in float32
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    grads = [torch.autograd.grad(o.square().mean(), list(m.parameters())) for o, m in zip(outs, models,
                                                                                          strict=True)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_cudnn_norm_without_its_package_is_an_unsupported_row_naming_it():
    rec = measure_case("llama", tiny(norm="cudnn"), measure_llama, {"device": "cpu"})
    assert rec.status == "unsupported" and "--norm cudnn" in rec.reason


def test_setups_that_differ_only_in_swaps_get_their_own_bars_and_columns(db, tmp_path):
    res = runner.invoke(app, ["llama", "--model", "tiny", "--batch-seq", "1x32", "--sdpa-backend", "MATH",
                              "--loss", "chunked", "--kv-heads", "native,expanded", "--iters", "2",
                              "--dtype", "fp32", "--device", "cpu", "--db", str(db), "--out", str(tmp_path),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "training_timing.csv")
    assert list(df.swaps) == ["loss=chunked", "loss=chunked,kv=expanded"]
    assert list(df.kv_heads) == ["native", "expanded"]
    assert (tmp_path / "iteration_time.png").stat().st_size > 0
    assert list(llama_sdpa.summary_table(df).columns) == ["shape", "math + loss=chunked",
                                                          "math + loss=chunked,kv=expanded"]


def test_hf_rope_kernel_matches_transformers_on_a_transposed_view():
    """The layout Llama's attention hands over: q viewed [b, n, h, d] and transposed, per-batch
    cos/sin with repeated halves. Stock transformers in float64 is the reference."""
    pytest.importorskip("triton")
    from transformers.models.llama import modeling_llama

    from trainperf.kernels.rope import rope_triton_hf
    b, n, h, d = 2, 19, 3, 16
    q = torch.randn(b, n, h, d, device=DEVICE).transpose(1, 2).requires_grad_()
    angles = torch.rand(b, n, d // 2, device=DEVICE) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    out = rope_triton_hf(q, cos, sin)
    q64 = q.detach().double().requires_grad_()
    ref, _ = modeling_llama.apply_rotary_pos_emb(q64, q64, cos.double(), sin.double())
    assert rel_err(out, ref) < 1e-6
    dout = torch.randn_like(out)
    grad, ref_grad = torch.autograd.grad(out, q, dout)[0], torch.autograd.grad(ref, q64, dout.double())[0]
    assert rel_err(grad, ref_grad) < 1e-6


def test_rope_swap_leaves_other_models_stock(monkeypatch):
    """The rope dispatcher is process-wide; only the swapped model may take the Triton path."""
    pytest.importorskip("triton")
    import trainperf.kernels.rope as rope_mod

    cfg = hf_llama.load_config("tiny")
    swapped, other = (hf_llama.build_model(cfg, torch.float32, torch.device(DEVICE)) for _ in range(2))
    hf_llama.apply_swaps(swapped, rope="triton")
    calls = []
    real = rope_mod.rope_triton_hf
    monkeypatch.setattr(rope_mod, "rope_triton_hf", lambda *a: calls.append(1) or real(*a))
    inputs = {"inputs_embeds": torch.randn(1, 8, cfg.hidden_size, device=DEVICE),
              "attention_mask": torch.ones(1, 8, dtype=torch.long, device=DEVICE)}
    for m in (swapped, other):
        hf_llama.set_attention(m, hf_llama.attention_name("MATH", False))
    other(**inputs)
    assert calls == []
    swapped(**inputs)
    assert len(calls) == 2 * cfg.num_hidden_layers  # q and k in every layer


@pytest.mark.parametrize("setup", [{"compile": "layers", "loss": "chunked"}, {"compile": "on"},
                                   {"compile": "layers", "loss": "chunked", "float8": "trainperf-all"}])
def test_a_compiled_step_traces_each_graph_whole(setup):
    """No graph break in a compiled model or layer: the RoPE dispatcher (installed in every model
    for its profiling range) once read a ContextVar, which Dynamo cannot trace, and split every
    decoder layer's graph there; trainperf's float8 products are operators it traces too."""
    from torch._dynamo.utils import counters

    counters.clear()
    spec = llama_sdpa.setup_spec(setup, "MATH", batch=1, seq=16, warmup=1, iters=1, model="tiny",
                                 device="cpu")
    step = llama_sdpa.LlamaStep(spec, torch.device("cpu"))
    try:
        step()
    finally:
        step.close()
    assert dict(counters["graph_break"]) == {}


def tiny_iteration(setup: dict[str, str], around=contextlib.nullcontext) -> tuple[float, object]:
    """The loss of the tiny Llama's second iteration on FLASH_ATTENTION (the first chooses the K/V
    mode and compiles), run inside `around()`; and the model's config."""
    spec = llama_sdpa.setup_spec(setup, "FLASH_ATTENTION", batch=1, seq=16, warmup=1, iters=1,
                                 model="tiny", device="cpu", dtype="fp32")
    step = llama_sdpa.LlamaStep(spec, torch.device("cpu"))
    try:
        llama_sdpa.choose_kv_mode(step, "FLASH_ATTENTION")
        with around():
            return step().item(), step.cfg
    finally:
        step.close()


def test_a_model_compiled_whole_runs_causal_attention_without_a_mask(monkeypatch):
    """Compiled whole, transformers cannot see that the all-ones mask pads nothing and built the
    [seq, seq] mask, through which SDPA computed the masked half too; the step now takes SDPA's
    causal mode there, as eagerly, with the same loss."""
    calls, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, is_causal=False, **kwargs):
        calls.append((attn_mask is None, is_causal))
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kwargs)

    @contextlib.contextmanager
    def counted():
        calls.clear()
        yield

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    losses = []
    for setup in ({}, {"compile": "on"}):
        loss, cfg = tiny_iteration(setup, counted)
        losses.append(loss)
        assert calls == [(True, True)] * cfg.num_hidden_layers, setup
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


def test_a_model_compiled_whole_computes_its_loss_in_the_compiled_graph():
    """Compiled whole, the cross-entropy is part of the compiled graph, as where transformers computes
    it from labels inside the forward: no eager loss op runs, and the loss is the eager one."""
    from torch.profiler import ProfilerActivity, profile

    losses = []
    for setup, eager_loss_ops in (({}, 1), ({"compile": "on"}, 0)):
        prof = profile(activities=[ProfilerActivity.CPU])
        losses.append(tiny_iteration(setup, lambda prof=prof: prof)[0])
        ops = {e.key: e.count for e in prof.key_averages()}
        assert ops.get("aten::cross_entropy_loss", 0) == eager_loss_ops, setup
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


@pytest.mark.parametrize("mode, options", [("layers", None), ("layers-tuned", llama_sdpa.TUNED)])
def test_compiling_each_decoder_layer_keeps_the_loss_and_gradients(mode, options, monkeypatch):
    """--compile layers[-tuned]: every decoder layer is compiled on its own (the tuned mode with
    Inductor's coordinate-descent tuning), the numbers stay the eager ones."""
    asked, compile_module = [], torch.nn.Module.compile

    def recording(module, **kwargs):
        asked.append(kwargs.get("options"))
        compile_module(module, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "compile", recording)
    spec = tiny(sdpa_backend="FLASH_ATTENTION")  # MATH is decomposed by the compiler, FLASH stays an op
    eager, regional = llama_sdpa.LlamaStep(spec, torch.device("cpu")), llama_sdpa.LlamaStep(
        llama_sdpa.LlamaSpec(**{**spec.__dict__, "compile": mode}), torch.device("cpu"))
    assert all(layer._compiled_call_impl is not None for layer in regional.model.model.layers)
    assert asked and all(o == options for o in asked)
    assert eager.model.model.layers[0]._compiled_call_impl is None
    for step in (eager, regional):
        step.opt = None  # compare the gradients of one iteration, before any update
        hf_llama.set_attention(step.model, hf_llama.attention_name("FLASH_ATTENTION", False))
    torch.testing.assert_close(regional(), eager(), rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(eager.model.named_parameters(), regional.model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)


def _row(backend, mean_s, compile="off", swaps="none", batch=1, seq=32):
    spec = tiny(sdpa_backend=backend, batch=batch, seq=seq, compile=compile)
    return Record("llama", spec.__dict__, "ok", {"iter_s_mean": mean_s, "swaps": swaps})


def test_best_stock_is_the_fastest_row_without_swaps_eager_or_compiled():
    records = [_row("MATH", 4.0), _row("FLASH_ATTENTION", 2.0, compile="on"), _row("FLASH_ATTENTION", 3.0),
               _row("FLASH_ATTENTION", 1.0, compile="layers", swaps="loss=chunked"),
               _row("FLASH_ATTENTION", 0.5, swaps="norm=triton"), _row("MATH", 8.0, batch=2, seq=16)]
    df = llama_sdpa.timing_table(records, baseline="MATH")
    # per-layer compile and swapped rows are trainperf's, not stock: they never set the bar
    assert list(df.vs_best_stock) == pytest.approx([0.5, 1.0, 2 / 3, 2.0, 4.0, 1.0])
    assert list(df.speedup) == pytest.approx([1.0, 2.0, 4 / 3, 4.0, 8.0, 1.0])


def test_records_from_before_the_compile_modes_read_as_on_and_off():
    old = [Record("llama", {**_row("MATH", 2.0).spec, "compile": c}, "ok",
                  {"iter_s_mean": t, "swaps": "none"})
           for c, t in ((False, 2.0), (True, 1.0))]
    df = llama_sdpa.timing_table(old, baseline="MATH")
    assert list(df.compile) == ["off", "on"] and list(df.speedup) == pytest.approx([1.0, 2.0])


def test_compile_layers_names_what_it_needs_on_a_model_without_decoder_layers():
    from trainperf.core.errors import Unsupported

    with pytest.raises(Unsupported, match="--compile layers: Linear has no model.layers"):
        hf_llama.compile_targets(torch.nn.Linear(2, 2))
    model = hf_llama.build_model(hf_llama.load_config("tiny"), torch.float32, torch.device("cpu"))
    targets = hf_llama.compile_targets(model)
    assert targets[:-1] == list(model.model.layers) and targets[-1] is model.model.norm


class _HostReads(torch.overrides.TorchFunctionMode):
    """Counts the calls that read a tensor's value on the host (a device sync on a GPU)."""

    READS = {torch.Tensor.all, torch.Tensor.any, torch.Tensor.item, torch.Tensor.__bool__,
             torch.Tensor.tolist}

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.reads += func in self.READS
        return func(*args, **(kwargs or {}))


def test_own_attention_builds_no_mask_and_reads_nothing_on_the_host(monkeypatch):
    """trainperf's own backends take no padding mask, so transformers' host check of the all-ones
    mask (a sync per forward on a GPU) is skipped; PyTorch's backends still make it. The output
    matches the MATH backend's."""
    def causal_sdpa(q, k, v, causal, scale):  # noqa: ANN001, ANN202
        groups = q.shape[1] // k.shape[1]
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    monkeypatch.setattr(hf_llama, "_attention_for", lambda impl, device: causal_sdpa)
    cfg = hf_llama.load_config("tiny")
    torch.manual_seed(0)
    model = hf_llama.build_model(cfg, torch.float64, torch.device("cpu"))
    x = torch.randn(2, 24, cfg.hidden_size, dtype=torch.float64)
    mask = torch.ones(2, 24, dtype=torch.long)
    outputs, reads = {}, {}
    for backend in ("MATH", "FA4"):
        hf_llama.set_attention(model, hf_llama.attention_name(backend, expand_kv=False))
        with _HostReads() as mode:
            outputs[backend] = model(inputs_embeds=x, attention_mask=mask).logits
        reads[backend] = mode.reads
    assert reads["FA4"] == 0 and reads["MATH"] > 0
    torch.testing.assert_close(outputs["FA4"], outputs["MATH"], rtol=1e-10, atol=1e-12)


def test_own_attention_compiles_without_dynamo_warnings(monkeypatch):
    """torch.compile traces the per-step lookup of trainperf's own attention; it takes no cache
    wrapper there, at which Dynamo warns of possible silent incorrectness in every user's run."""
    from trainperf.attention import registry

    def causal_sdpa(q, k, v, causal, scale):  # noqa: ANN001, ANN202
        groups = q.shape[1] // k.shape[1]
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    monkeypatch.setattr(registry, "get_attention", lambda impl, device: causal_sdpa)
    monkeypatch.setattr(hf_llama, "_IMPLEMENTATIONS", {})
    torch._dynamo.reset()
    cfg = hf_llama.load_config("tiny")
    model = hf_llama.build_model(cfg, torch.float32, torch.device("cpu"))
    hf_llama.set_attention(model, hf_llama.attention_name("FA4", expand_kv=False))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        logits = torch.compile(model)(inputs_embeds=torch.randn(1, 16, cfg.hidden_size)).logits
    assert torch.isfinite(logits).all()
    assert not [str(w.message) for w in seen if "Dynamo" in str(w.message)]


def test_recipe_step_builds_the_recipe_as_llama_runs_it_without_the_graph():
    """What probes capture themselves: `fast` on the CPU is per-layer compile and the chunked loss,
    its attention chosen, the first iteration run; the graph is theirs to add."""
    before_first_iteration = []

    def prepare(step):
        before_first_iteration.append(all(p.grad is None for p in step.model.parameters()))

    step = llama_sdpa.recipe_step("fast", 1, 16, device="cpu", backend="MATH", prepare=prepare, model="tiny")
    try:
        assert before_first_iteration == [True]
        assert step.swaps == ["loss=chunked"] and step.hidden_loss is not None
        assert all(layer._compiled_call_impl is not None for layer in step.model.model.layers)
        assert torch.isfinite(step())
    finally:
        step.close()
    with pytest.raises(SpecError, match="batch"):
        llama_sdpa.recipe_step("fast", 0, 16, device="cpu", backend="MATH", model="tiny")
