import pytest
import torch

from trainperf.core.errors import SpecError
from trainperf.core.runner import measure_case
from trainperf.workloads import step as stepmod
from trainperf.workloads.step import StepSpec, measure_step, validate


def tiny(**kw):
    base = {"seq": 16, "batch": 2, "dtype": "fp32", "compile": False, "mode": "train",
            "device": "cpu", "warmup": 1, "iters": 3, "vocab": 50}
    return StepSpec.from_preset("tiny", **{**base, **kw})


@pytest.mark.parametrize("mode, phases", [("train", {"forward", "backward", "optimizer"}),
                                          ("forward", {"forward"}),
                                          ("forward-backward", {"forward", "backward"})])
def test_step_metrics_per_mode(mode, phases):
    m = measure_step(tiny(mode=mode))
    for phase in (*phases, "step"):
        assert m[f"{phase}_ms_median"] > 0
    for phase in {"forward", "backward", "optimizer"} - phases:
        assert f"{phase}_ms_median" not in m
    assert m["step_ms_n"] == 3
    assert m["tokens_per_s"] == pytest.approx(2 * 16 / (m["step_ms_median"] / 1e3))
    assert m["tflops"] > 0 and m["mfu"] is None  # no peak is known for a CPU


def test_bf16_autocast_runs_on_cpu():
    assert measure_step(tiny(dtype="bf16"))["step_ms_median"] > 0


def test_overrides_replace_preset_dims():
    s = tiny(d_model=32, heads=2)
    assert (s.d_model, s.heads, s.layers) == (32, 2, 2)


@pytest.mark.parametrize("kw, message", [
    ({"seq": 0}, "--seq must be positive"),
    ({"d_model": 30, "heads": 4}, "not divisible"),
    ({"dtype": "fp8"}, "valid choices: fp32, bf16, fp16"),
    ({"dtype": "fp16"}, "needs a CUDA GPU"),
    ({"mode": "sideways"}, "valid choices: train"),
])
def test_validation_errors_name_the_bad_value(kw, message):
    with pytest.raises(SpecError, match=message):
        validate(tiny(**kw))


def test_missing_compiler_is_a_spec_error(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SpecError, match="--compile on needs a C\\+\\+ compiler"):
        validate(tiny(compile=True))


def test_oom_inside_the_workload_becomes_an_oom_record(monkeypatch):
    def explode(*a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB.")
    monkeypatch.setattr(stepmod, "lm_loss", explode)
    rec = measure_case("step", tiny(), measure_step, {"device": "cpu"})
    assert rec.status == "oom"
    assert rec.metrics["oom_tried_gb"] == pytest.approx(20 / 1024, abs=1e-3)


def test_compiled_step_compiles_on_the_first_step_only(compiled_graphs):
    """With --compile on, later steps reuse the first step's graphs. The attention op used to pick
    its implementation on its first call inside the compiled layer, which left a guard on that
    choice and recompiled every layer on the second step (inside the timed steps at --warmup 1)."""
    case = stepmod.StepCase(tiny(compile=True, seq=12, attention="naive"))
    case.run()
    graphs = compiled_graphs()
    case.run()
    case.run()
    assert compiled_graphs() == graphs
