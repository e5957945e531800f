import pytest
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.store import Store
from trainperf.workloads.attention import AttentionSpec, attention_flops, measure_attention

runner = CliRunner()


def spec(**kw):
    base = dict(attention="naive", batch=1, heads=2, seq=32, head_dim=16, dtype="fp32",
                mode="forward-backward", causal=True, device="cpu", warmup=1, iters=3)
    return AttentionSpec(**{**base, **kw})


def test_flops_convention():
    s = spec(batch=2, heads=3, seq=10, head_dim=4, causal=False, mode="forward")
    assert attention_flops(s) == 4 * 2 * 3 * 100 * 4
    causal_fwd_bwd = spec(batch=2, heads=3, seq=10, head_dim=4, mode="forward-backward")
    assert attention_flops(causal_fwd_bwd) == 3.5 * 4 * 2 * 3 * 100 * 4 / 2


@pytest.mark.parametrize("mode", ["forward", "backward", "forward-backward"])
def test_metrics_schema(mode):
    m = measure_attention(spec(mode=mode))
    assert {"time_ms_median", "time_ms_std", "time_ms_n", "tflops"} <= set(m)
    assert m["time_ms_n"] == 3 and m["time_ms_median"] > 0


def test_cli_sweep_records_unsupported_rows_and_writes_plots(db, tmp_path):
    out = tmp_path / "plots"
    res = runner.invoke(app, ["attention", "--attention", "naive,torch-fa2,sdpa-flash", "--seq", "32,64",
                              "--head-dim", "16", "--dtype", "fp32", "--batch", "1", "--heads", "2",
                              "--iters", "2", "--warmup", "1", "--device", "cpu", "--quiet",
                              "--db", str(db), "--out", str(out)])
    assert res.exit_code == 0, res.output
    recs = Store(db).records(workload="attention")
    assert len(recs) == 6
    flash = [r for r in recs if r.spec["attention"] == "sdpa-flash"]
    assert {r.status for r in flash} == {"unsupported"} and "CUDA" in flash[0].reason
    assert (out / "attention_forward-backward_d16_fp32.png").stat().st_size > 0


def test_cli_rejects_unknown_attention(db):
    res = runner.invoke(app, ["attention", "--attention", "fastest", "--device", "cpu", "--db", str(db)])
    assert res.exit_code == 2 and "valid choices" in res.output


@pytest.mark.gpu
def test_a_compiled_case_on_the_gpu_records_kernel_and_host_time():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    m = measure_attention(spec(attention="sdpa-flash", batch=2, heads=4, seq=256, head_dim=64, dtype="bf16",
                               device="cuda", compile=True))
    assert 0 < m["kernel_ms"] < 10 * m["time_ms_median"]  # the kernels of one call, not of many
    assert m["host_ms"] > 0
