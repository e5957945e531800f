"""Probe: the fastest step with its loss and attention settings changed one at a time, at the shapes
where its lead is smallest. usage: PYTHONPATH=src python3 benchmarks/probes/fast_step_levers.py
DEADLINE_EPOCH SHAPE...

Per shape the `fast` step is built once (each decoder layer compiled, FA4, quack's MLP, the
chunked loss) and captured as a CUDA graph once per variant, as the suite runs it; the variants
take turns in three rounds of 10 replays: CUDA-event time, energy, clock and power (GpuMonitor),
and the capture's peak memory.
- `now`: the step as trainperf runs it.
- `rows2048`: logits blocks of 2,048 rows instead of the default 8,192 (more read-modify-writes of
  the head-weight gradient, a quarter of the block's memory).
- `foreach-scale`: the chunked loss's backward scales its stored gradients in one
  `_foreach_mul_` pass even when the incoming gradient is 1, instead of the kernel that skips it.
- `dqswap`: FA4's Hopper backward with dQ's MMA swapped (BwdConfig 128x128, dQ_swapAB).
"""

import functools
import gc
import sys
import time

import torch
from flash_attn.cute import interface as fa

from trainperf.core.gpu_monitor import monitored_calls
from trainperf.kernels import chunked_loss
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

DEFAULT_BWD = fa._tile_size_bwd_sm90
DQSWAP = fa.BwdConfig(128, 128, 2, 2, 2, True, False, True, 1, 2, 2)


def foreach_backward(ctx, grad_out, _g_hidden, _g_weight):  # noqa: ANN001, ANN201
    grad_hidden, grad_weight = ctx.saved_tensors
    torch._foreach_mul_([grad_hidden, grad_weight], grad_out.to(grad_hidden.dtype))
    return grad_hidden, grad_weight, None, None, None


def use_loss_backward(foreach: bool) -> None:
    chunked_loss.chunked_loss_op.register_autograd(foreach_backward if foreach else chunked_loss._backward,
                                                   setup_context=chunked_loss._setup)


VARIANTS = {  # name: (rows per logits block, None for the default; foreach scaling; dQ swap)
    "now": (None, False, False),
    "rows2048": (2048, False, False),
    "foreach-scale": (None, True, False),
    "dqswap": (None, False, True),
}


def in_step(shape: str, deadline: float) -> None:
    batch, seq = map(int, shape.split("x"))
    spec = llama_sdpa.setup_spec(llama_sdpa.recipe_setup("fast", "cuda", replayed=False), "CUDNN_ATTENTION",
                                 batch=batch, seq=seq)
    t0 = time.time()
    step = llama_sdpa.LlamaStep(spec, torch.device("cuda"))
    llama_sdpa.choose_kv_mode(step, spec.sdpa_backend)
    for _ in range(2):
        step()
    print(f"{shape} {spec.label()}: built in {time.time() - t0:.0f} s", flush=True)
    results = {name: [] for name in VARIANTS}
    peaks = {}
    for rnd in range(3):
        for name, (rows, foreach, dqswap) in VARIANTS.items():
            if time.time() > deadline:
                print("deadline reached", flush=True)
                break
            step.hidden_loss = functools.partial(chunked_loss.chunked_lm_loss, chunk=rows)
            use_loss_backward(foreach)
            fa._tile_size_bwd_sm90 = (lambda *a, **k: DQSWAP) if dqswap else DEFAULT_BWD
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            graphed = GraphedIteration(step)
            peaks[name] = torch.cuda.max_memory_allocated() / 2**30
            graphed()
            r = monitored_calls(graphed, 10, torch.device("cuda"))
            results[name].append(r)
            print(f"  round {rnd} {name:13s}: {r['s']:.4f} s/iter, {r['j']:.1f} J/iter, "
                  f"{r.get('sm_clock_mhz')} MHz, {r.get('power_w')} W, peak {peaks[name]:.2f} GiB, "
                  f"loss {float(graphed.output):.5f}", flush=True)
            del graphed
    use_loss_backward(False)
    fa._tile_size_bwd_sm90 = DEFAULT_BWD
    base = min(r["s"] for r in results["now"]) if results["now"] else float("nan")
    for name, rs in results.items():
        if rs:
            best, mean = min(r["s"] for r in rs), sum(r["s"] for r in rs) / len(rs)
            print(f"{shape} {name:13s}: best {best:.4f} s/iter, mean {mean:.4f}, {base / best:.4f}x over now,"
                  f" peak {peaks[name]:.2f} GiB", flush=True)
    step.close()


def main() -> None:
    deadline = float(sys.argv[1])
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in sys.argv[2:]:
        if time.time() > deadline - 120:
            print("deadline: skipping", shape, flush=True)
            break
        in_step(shape, deadline)
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
