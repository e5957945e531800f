"""The GPU paths users rely on, run where a GPU is: the GPU a record names, CUDA-event timing
against a known sleep kernel, the launch-bound flag, fp16 with a grad scaler that skips on inf,
peak memory of a known allocation, a real out-of-memory error and the case after it, and NCCL
collectives and DDP.
Run them with `PYTHONPATH=src pytest -m gpu`."""

import statistics
import time

import pytest
import torch

from trainperf.core.runner import measure_case
from trainperf.core.timing import PhaseTimer, start_measured_window, time_op
from trainperf.workloads.step import StepCase, StepSpec, phase_metrics

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

DEVICE = torch.device("cuda")
ENV = {"device": "cuda"}


def timed(fn, reps: int = 5) -> list[float]:
    return time_op(fn, DEVICE, warmup=1, reps=reps)


def test_cuda_event_times_follow_a_known_sleep_kernel():
    cycles = 20_000_000
    one = statistics.median(timed(lambda: torch.cuda._sleep(cycles)))
    two = statistics.median(timed(lambda: torch.cuda._sleep(2 * cycles)))
    assert two / one == pytest.approx(2.0, rel=0.1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    assert one == pytest.approx(wall_ms, rel=0.15)


def test_a_gpu_record_names_the_gpu_it_ran_on():
    import uuid

    from trainperf.core.env import capture

    named = capture(DEVICE)["gpu_uuid"]
    assert uuid.UUID(named.removeprefix("GPU-"))  # NVML's form or the bare one, a real UUID either way
    assert capture(DEVICE)["gpu_uuid"] == named


def test_launch_bound_is_flagged_for_tiny_kernels_and_not_for_a_large_gemm():
    tiny = torch.zeros(1, device=DEVICE)
    big = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    timer = PhaseTimer(DEVICE)
    start_measured_window(DEVICE)
    for _ in range(5):
        with timer.phase("step"):
            with timer.phase("forward"):
                for _ in range(500):
                    tiny.add_(1)
            with timer.phase("backward"):
                big @ big
    notes = phase_metrics(timer, ("forward", "backward"))["notes"]
    assert "launch-bound forward" in notes and "launch-bound backward" not in notes


def test_fp16_with_a_grad_scaler_skips_a_step_with_inf_gradients():
    spec = StepSpec.from_preset("tiny", seq=32, batch=2, dtype="fp16", compile=False, mode="train",
                                device="cuda", d_model=None, d_ff=None, layers=None, heads=None)
    case = StepCase(spec)
    case.run()  # a normal step
    before = [p.detach().clone() for p in case.model.parameters()]
    scale = case.scaler.get_scale()
    handle = case.model.lm_head.weight.register_hook(lambda g: g * float("inf"))
    case.run()
    handle.remove()
    assert all(torch.equal(a, p) for a, p in zip(before, case.model.parameters(), strict=True))  # skipped
    assert case.scaler.get_scale() < scale  # and the scale backed off


def test_peak_memory_of_a_known_allocation():
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    x = torch.empty(2**28, dtype=torch.float32, device=DEVICE)  # 1 GiB
    peak = torch.cuda.max_memory_allocated() - base
    del x
    assert peak == pytest.approx(2**30, rel=0.01)


def _gemm_ms(spec) -> dict:
    a = torch.randn(spec["n"], spec["n"], device=DEVICE, dtype=torch.bfloat16)
    return {"ms": statistics.median(timed(lambda: a @ a, reps=30))}


def _allocate_past_the_card(spec) -> dict:
    free, _ = torch.cuda.mem_get_info()
    torch.empty(int(free * 2), dtype=torch.uint8, device=DEVICE)
    return {}


def test_a_real_oom_is_an_oom_record_and_the_next_case_runs_at_its_normal_speed():
    alone = measure_case("t", {"n": 8192}, _gemm_ms, ENV)
    oom = measure_case("t", {"n": 0}, _allocate_past_the_card, ENV)
    after = measure_case("t", {"n": 8192}, _gemm_ms, ENV)
    assert oom.status == "oom" and oom.metrics.get("oom_tried_gb", 0) > 1
    assert after.status == "ok" and after.metrics["ms"] == pytest.approx(alone.metrics["ms"], rel=0.05)
    assert torch.cuda.memory_allocated() < 2**30  # nothing of the failed case is left


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_nccl_comm_and_ddp_on_two_gpus(tmp_path):
    from typer.testing import CliRunner

    from trainperf.cli import app
    from trainperf.core.store import Store

    db = tmp_path / "r.db"
    runner = CliRunner()
    res = runner.invoke(app, ["comm", "--world-size", "2", "--bytes", "1MB", "--iters", "5", "--quiet",
                              "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["ddp", "--world-size", "2", "--variant", "flat,ddp", "--model", "tiny",
                              "--iters", "3", "--quiet", "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    records = Store(db).records()
    assert {r.workload for r in records} == {"comm", "ddp"} and all(r.status == "ok" for r in records)
    assert all(r.metrics["correct"] for r in records if r.workload == "comm")
