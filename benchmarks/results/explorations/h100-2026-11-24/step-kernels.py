"""Probe: where one replayed iteration of a recipe's step spends the GPU's time.
usage: python3 step-kernels.py DEADLINE_EPOCH RECIPE:SHAPE...

For each case the step is built as the suite builds it, captured as a CUDA graph, timed in three
blocks of 10 replays (CUDA events, with the GPU's energy, clock and power from GpuMonitor), then
two replays run under torch.profiler. Printed per iteration: wall time, the union of kernel
intervals (busy), the idle rest, the kernel count, and the kernels summed by name, longest first.
"""

import collections
import gc
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

PROFILED = 2


def block(run, n: int = 10) -> dict:  # noqa: ANN001
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with GpuMonitor(torch.device("cuda")) as monitor:
        start.record()
        for _ in range(n):
            run()
        end.record()
        torch.cuda.synchronize()
    m = monitor.metrics()
    return {"s": start.elapsed_time(end) / 1e3 / n, "j": m.get("energy_j", float("nan")) / n,
            "mhz": m.get("sm_clock_mhz"), "w": m.get("power_w")}


def kernel_table(run) -> None:  # noqa: ANN001
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED):
            run()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and e.device_time > 0]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, last = 0.0, float("-inf")
    for s, e in spans:
        if e > last:
            busy += e - max(s, last)
            last = e
    wall = spans[-1][1] - spans[0][0]
    print(f"  per iteration: wall {wall / PROFILED / 1e3:.2f} ms, busy {busy / PROFILED / 1e3:.2f} ms, "
          f"idle {(wall - busy) / PROFILED / 1e3:.2f} ms, kernels {len(kernels) / PROFILED:.0f}", flush=True)
    by_name: dict = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_name[e.name][0] += e.device_time / PROFILED
        by_name[e.name][1] += 1
    for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:45]:
        print(f"  {us / 1e3:9.3f} ms {n // PROFILED:5d}  {name[:150]}", flush=True)


def main() -> None:
    deadline = float(sys.argv[1])
    for case in sys.argv[2:]:
        recipe, shape = case.split(":")
        batch, seq = map(int, shape.split("x"))
        if time.time() > deadline:
            print("deadline reached", flush=True)
            return
        setup = llama_sdpa.recipe_setup(recipe, "cuda")
        if recipe == "fp8":
            setup["compile"] = "layers"  # untuned: minutes less compile
        spec = llama_sdpa.setup_spec(setup, "CUDNN_ATTENTION", batch=batch, seq=seq)
        t0 = time.time()
        step = llama_sdpa.LlamaStep(spec, torch.device("cuda"))
        graphed = None
        try:
            llama_sdpa.choose_kv_mode(step, spec.sdpa_backend)
            for _ in range(3):
                step()
            torch.cuda.reset_peak_memory_stats()
            graphed = GraphedIteration(step)
            torch.cuda.synchronize()
            print(f"{case}: built and captured in {time.time() - t0:.0f} s, peak during capture "
                  f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
            for rnd in range(3):
                r = block(graphed)
                print(f"{case} round {rnd}: {r['s']:.4f} s/iter, {r['j']:.1f} J/iter, {r['mhz']} MHz, "
                      f"{r['w']} W", flush=True)
            kernel_table(graphed)
        except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
            print(f"{case}: error {type(exc).__name__}: {str(exc)[:600]}", flush=True)
        finally:
            step.close()
            del step
            graphed = None
            gc.collect()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
