"""`trainperf kernels`: every implementation of a part computes what the PyTorch reference does (so
the benchmark compares like with like), traffic-based bandwidth, and rows for what cannot run."""

import pytest
import torch
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.errors import SpecError
from trainperf.core.store import Store
from trainperf.workloads.kernels import IMPLS, KernelSpec, _op, measure_kernel, validate

runner = CliRunner()


def spec(kernel, **kw):
    base = dict(tokens=32, d_model=64, dtype="fp32", mode="forward-backward", device="cpu", vocab=96,
                warmup=1, iters=2)
    return KernelSpec(kernel=kernel, **{**base, **kw})


def outputs_and_grads(kernel):
    torch.manual_seed(0)
    fn, inputs, wrt = _op(spec(kernel), torch.device("cpu"))
    with torch.no_grad():  # the same inputs for every implementation
        for t in inputs:
            t.copy_(torch.randn_like(t) * 0.5)
    out = fn(*inputs)
    return out, torch.autograd.grad(out, wrt, torch.ones_like(out))


@pytest.mark.parametrize("part, impl", [(p, i) for p, impls in IMPLS.items() for i in impls
                                        if i not in ("torch", "triton")])
def test_each_implementation_matches_the_reference(part, impl):
    ref_out, ref_grads = outputs_and_grads(f"{part}-torch")
    out, grads = outputs_and_grads(f"{part}-{impl}")
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_bandwidth_counts_the_traffic_of_each_pass():
    fwd = measure_kernel(spec("swiglu-torch", mode="forward"))
    assert fwd["gbps"] == pytest.approx(3 * 32 * 64 * 4 / (fwd["time_ms_median"] / 1e3) / 1e9)
    assert "gbps" not in measure_kernel(spec("loss-torch"))  # no fixed minimum traffic


@pytest.mark.parametrize("kw, message", [
    ({"kernel": "norm-cuda"}, "valid choices: norm-torch"),
    ({"kernel": "rope-torch", "d_model": 100}, "multiple of the head dim 64"),
    ({"kernel": "norm-torch", "mode": "backward"}, "valid choices: forward, forward-backward"),
])
def test_bad_specs_are_refused(kw, message):
    with pytest.raises(SpecError, match=message):
        validate(spec(**kw))


def test_cli_rows_plot_and_a_triton_kernel_without_a_gpu_is_unsupported(db, tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    res = runner.invoke(app, ["kernels", "--kernel", "norm-torch,norm-triton,swiglu-torch", "--tokens", "16",
                              "--d-model", "64", "--device", "cpu", "--iters", "2", "--warmup", "1",
                              "--quiet", "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    status = {r.spec["kernel"]: (r.status, r.reason) for r in Store(db).records(workload="kernels")}
    assert status["norm-torch"][0] == "ok" and status["swiglu-torch"][0] == "ok"
    assert status["norm-triton"][0] == "unsupported" and "norm-triton needs" in status["norm-triton"][1]
    assert (tmp_path / "kernels.csv").exists() and (tmp_path / "kernels_forward-backward_fp32.png").exists()
