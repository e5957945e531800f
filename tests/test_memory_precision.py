import pytest
import torch
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.profiling.memory import memory_profile
from trainperf.profiling.precision import accumulation_experiment, dtype_report
from trainperf.workloads.step import StepCase, StepSpec

runner = CliRunner()


def tiny_case():
    return StepCase(StepSpec.from_preset("tiny", seq=32, batch=2, dtype="fp32", compile=False,
                                         mode="train", device="cpu", d_model=None, d_ff=None, layers=None,
                                         heads=None))


def test_cpu_memory_profile_reports_phases_allocations_and_timeline(tmp_path):
    case = tiny_case()
    rep = memory_profile(case.run, case.model, torch.device("cpu"), tmp_path, "t")
    phases = rep.phases.set_index("phase")
    assert {"fwd", "bwd", "optimizer", "step"} <= set(phases.index)
    assert phases.loc["step", "peak_allocated_gb"] >= phases.loc["fwd", "peak_allocated_gb"] > 0
    assert rep.largest["gb"].is_monotonic_decreasing
    assert rep.largest.iloc[0]["module"] != "(outside any range)"
    assert any(m.startswith("fwd.") for m in rep.largest["module"])
    assert (tmp_path / "memory_t_timeline.png").stat().st_size > 0
    assert any("no caching-allocator snapshot" in n for n in rep.notes)


def test_forward_only_memory_profile_stops_after_forward(tmp_path):
    case = tiny_case()
    rep = memory_profile(case.run, case.model, torch.device("cpu"), tmp_path, "f", until="forward")
    assert set(rep.phases.phase) == {"step", "fwd"}


def test_memory_of_a_llama_iteration_names_its_modules_by_range(tmp_path):
    pytest.importorskip("transformers")
    from trainperf.workloads.llama_sdpa import LlamaSpec, LlamaStep

    step = LlamaStep(LlamaSpec(sdpa_backend="MATH", batch=1, seq=32, dtype="fp32", model="tiny",
                               device="cpu"), torch.device("cpu"))
    rep = memory_profile(step, step.model, torch.device("cpu"), tmp_path, "l")
    assert {"fwd", "bwd", "step"} <= set(rep.phases.phase)  # plain SGD allocates nothing
    assert any(m.startswith("fwd.layer.") for m in rep.largest["module"])
    res = runner.invoke(app, ["memory", "llama", "--device", "cpu", "--dtype", "fp32", "--out",
                              str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "memory_llama_tiny_1x64_fp32_timeline.png").exists()


def test_memory_cli_rejects_a_bad_phase():
    res = runner.invoke(app, ["memory", "step", "--device", "cpu", "--phase", "backward"])
    assert res.exit_code == 2 and "valid choices: forward, step" in res.output


def test_dtypes_under_autocast():
    df = dtype_report(torch.device("cpu"), modes=("fp32", "bf16"))
    get = {(r.mode, r.tensor): r.dtype for r in df.itertuples()}
    assert get[("fp32", "linear output (qkv_proj)")] == "torch.float32"
    assert get[("bf16", "parameters")] == "torch.float32"  # autocast keeps fp32 master weights
    assert get[("bf16", "linear output (qkv_proj)")] == "torch.bfloat16"
    assert get[("bf16", "norm output (attn prenorm)")] == "torch.float32"  # our RMSNorm keeps its input dtype
    assert get[("bf16", "logits")] == "torch.bfloat16"
    assert get[("bf16", "loss")] == "torch.float32"
    assert get[("bf16", "gradients")] == "torch.float32"


def test_accumulation_experiment():
    df = accumulation_experiment().set_index("case")
    err = df["abs_error"]
    assert df["exact"].iloc[0] == pytest.approx(10.0)
    assert err["fp32 values, fp32 accumulator"] < 1e-3
    assert err["fp16 values, fp16 accumulator"] > 10 * err["fp16 values, fp32 accumulator"]
    assert err["bf16 values, bf16 accumulator"] > 1.0  # the sum stalls once 0.01 is below half an ulp
