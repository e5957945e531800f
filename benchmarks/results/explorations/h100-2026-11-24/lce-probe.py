"""Probe: quack's scaled-exp linear cross-entropy against trainperf's chunked loss, alone and inside
`fast`'s step (tidied after the run, same calls). usage: python3 lce-probe.py DEADLINE_EPOCH SHAPE...

Needs flash-attn-4 with quack-kernels and a Hopper GPU; output in lce-probe.txt.
"""

import sys
import time

import pynvml
import torch

from trainperf.kernels.chunked_loss import chunked_lm_loss
from trainperf.kernels.quack_mlp import _load_quack
from trainperf.workloads import llama_sdpa

_load_quack()  # keys the DSL objects quack's epilogue cache cannot key itself
from quack.linear_cross_entropy import scaled_exp_linear_cross_entropy  # noqa: E402


def chunk_for(rows: int) -> int:
    """quack's chunks must divide the rows: the largest multiple of 128 up to 4096 that does."""
    return next(c for c in range(4096, 127, -128) if rows % c == 0)


def quack_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return scaled_exp_linear_cross_entropy(hidden, weight, targets, chunk_size=chunk_for(hidden.shape[0]))


LOSSES = {"ours": chunked_lm_loss, "quack": quack_loss}


def event_ms(fn, n: int) -> float:  # noqa: ANN001
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def clock_power() -> tuple[int, float]:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def numerics_and_loss_alone(weight: torch.Tensor, rows: int, sub: int = 512) -> None:
    torch.manual_seed(1)
    hidden = torch.randn(rows, weight.shape[1], device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, weight.shape[0], (rows,), device="cuda")
    out = {}
    for name, fn in LOSSES.items():
        h, w = hidden.clone().requires_grad_(), weight.detach().clone().requires_grad_()
        loss = fn(h, w, targets)
        loss.backward()
        out[name] = (loss.double(), h.grad.double(), w.grad.double())
    h, w = hidden[:sub].double().requires_grad_(), weight.detach().double().requires_grad_()
    (torch.nn.functional.cross_entropy(h @ w.t(), targets[:sub]) * sub / rows).backward()
    print(f"  numerics m={rows}: loss ours {out['ours'][0]:.6f} quack {out['quack'][0]:.6f}; "
          f"grad_h vs fp64 (first {sub} rows): ours {rel(out['ours'][1][:sub], h.grad):.2e} "
          f"quack {rel(out['quack'][1][:sub], h.grad):.2e}; grad_w quack vs ours "
          f"{rel(out['quack'][2], out['ours'][2]):.2e}", flush=True)
    for name, fn in LOSSES.items():
        h, w = hidden.clone().requires_grad_(), weight.detach().clone().requires_grad_()

        def fwd_bwd(fn=fn, h=h, w=w) -> None:  # noqa: ANN001
            h.grad = w.grad = None
            fn(h, w, targets).backward()

        fwd_bwd()
        fwd_bwd()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        ms = event_ms(fwd_bwd, 10)
        transient = (torch.cuda.max_memory_allocated() - base) / 2**30
        print(f"  loss alone {name}: {ms:.2f} ms fwd+bwd, transient {transient:.2f} GiB, "
              f"clock/power {clock_power()}", flush=True)


def in_the_step(shape: str) -> None:
    batch, seq = map(int, shape.split("x"))
    started = time.time()
    setup = llama_sdpa.recipe_setup("fast", "cuda")
    spec = llama_sdpa.setup_spec(setup, "CUDNN_ATTENTION", batch=batch, seq=seq)
    step = llama_sdpa.LlamaStep(spec, torch.device("cuda"))
    print(shape, spec.label(), flush=True)
    llama_sdpa.choose_kv_mode(step, spec.sdpa_backend, spec.kv_heads)
    numerics_and_loss_alone(step.model.lm_head.weight, batch * seq)
    for fn in LOSSES.values():  # warm both (compile, autotune)
        step.hidden_loss = fn
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in LOSSES}
    for round_ in range(3):  # alternating order, 6 iterations a turn
        order = list(LOSSES.items()) if round_ % 2 == 0 else list(reversed(LOSSES.items()))
        for name, fn in order:
            step.hidden_loss = fn
            step()
            times[name].append(event_ms(step, 6))
    peaks = {}
    for name, fn in LOSSES.items():
        step.hidden_loss = fn
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated() / 2**30
    for name, ms in times.items():
        print(f"  step {name}: " + " ".join(f"{x:.1f}" for x in ms)
              + f" ms  mean {sum(ms) / len(ms):.1f}  peak {peaks[name]:.2f} GiB", flush=True)
    print(f"  clock/power {clock_power()}  case wall {time.time() - started:.0f}s", flush=True)
    step.close()


if __name__ == "__main__":
    deadline = float(sys.argv[1])
    for shape in sys.argv[2:]:
        if time.time() > deadline - 120:
            print("deadline: skipping", shape)
            break
        in_the_step(shape)
        torch.cuda.empty_cache()
