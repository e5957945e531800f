"""Probe: trainperf's `fast` step eager against the same step captured as one CUDA graph.
usage: python3 graph-probe.py DEADLINE_EPOCH RECIPE:SHAPE...

For each case one model is built; after warm-up, blocks of 10 eager and 10 replayed iterations
alternate three times in one process, each block timed by CUDA events with the GPU's energy,
clock and power read by trainperf's GpuMonitor; output in graph-probe.txt.
"""

import gc
import sys
import time

import torch

from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration


def block(run, n: int = 10) -> dict:  # noqa: ANN001
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with GpuMonitor(torch.device("cuda")) as monitor:
        start.record()
        for _ in range(n):
            loss = run()
        end.record()
        torch.cuda.synchronize()
    m = monitor.metrics()
    return {"s": start.elapsed_time(end) / 1e3 / n, "j": m.get("energy_j", float("nan")) / n,
            "mhz": m.get("sm_clock_mhz"), "w": m.get("power_w"), "loss": float(loss)}


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
        torch.cuda.reset_peak_memory_stats()
        step = llama_sdpa.LlamaStep(spec, torch.device("cuda"))
        try:
            llama_sdpa.choose_kv_mode(step, spec.sdpa_backend)
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            eager_peak = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.reset_peak_memory_stats()
            graphed = GraphedIteration(step)
            torch.cuda.synchronize()
            graph_peak = torch.cuda.max_memory_allocated() / 2**30
            print(f"{case}: built and captured in {time.time() - t0:.0f} s; peak eager {eager_peak:.2f} GiB, "
                  f"during capture {graph_peak:.2f} GiB", flush=True)
            for rnd in range(3):
                for name, run in (("eager", step), ("graph", graphed)):
                    r = block(run)
                    print(f"{case} round {rnd} {name}: {r['s']:.4f} s/iter, {r['j']:.1f} J/iter, "
                          f"{r['mhz']} MHz, {r['w']} W, loss {r['loss']:.4f}", flush=True)
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
