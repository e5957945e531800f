"""triton-fa2 against cuDNN in alternating rounds, for a ratio that drift cannot tilt.

Single-run ratios near a 1.2x target move with the GPU's clock under its power limit
(one case measured before the other sees another clock). Here each round times both, in turn
(the order flips every round), so each round's ratio compares neighbours in time; the median
and the range of the round ratios are printed. Causal, bf16, forward + backward. First, as a
check of the autotuned kernels at this shape, the largest relative difference between the two
implementations' dQ, dK and dV (both bf16, so about 1e-2 is expected). With `variants`
(comma-separated), one triton-fa2 per variant joins the rounds, each against the same cuDNN:
`g<k>` runs with k heads per group of the causal launch order (`flash_triton.HEAD_GROUP`),
`dispatch` goes through the autotuner on every call (as before the direct launch), `direct` is
the library as it is, and `baseline` is another version of flash_triton.py, the file $BASELINE,
loaded as a module of its own (so the two versions' kernels and caches stay apart); `atomic` is
triton-fa2-atomic (the two-kernel backward, dQ by TMA reductions).
Usage: PYTHONPATH=src python3 benchmarks/probes/fa2_vs_cudnn_rounds.py B H N D [rounds [calls [variants]]]
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys

import torch

from trainperf.attention import flash_triton
from trainperf.attention.registry import get_attention
from trainperf.core.timing import time_op
from trainperf.kernels import tuning


def variant(fn, name: str):  # noqa: ANN001, ANN201
    """fn run as triton-fa2 variant `name` (see the module's docstring)."""
    def run():  # noqa: ANN202
        group = flash_triton.HEAD_GROUP
        if name.startswith("g"):
            flash_triton.HEAD_GROUP = int(name[1:])
        elif name == "dispatch":
            tuning._CHOSEN.clear()
        try:
            return fn()
        finally:
            flash_triton.HEAD_GROUP = group
    return run


def baseline_attention():  # noqa: ANN201
    """flash_attention_triton of the flash_triton.py at $BASELINE."""
    spec = importlib.util.spec_from_file_location("baseline_flash_triton", os.environ["BASELINE"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.flash_attention_triton


def main(b: int, h: int, n: int, d: int, rounds: int = 10, calls: int = 30, variants: str = "") -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device=device, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)

    def grads_of(fn):  # noqa: ANN001, ANN202
        return lambda: torch.autograd.grad(fn(q, k, v, causal=True), (q, k, v), dout)

    ops = {name: grads_of(get_attention(name, device)) for name in ("sdpa-cudnn", "triton-fa2")}
    names = variants.split(",") if variants else []
    others = {"baseline": baseline_attention, "atomic": lambda: get_attention("triton-fa2-atomic", device)}
    if names:
        triton_op = ops.pop("triton-fa2")
    for name in names:
        ops[f"triton-fa2 {name}"] = grads_of(others[name]()) if name in others else variant(triton_op, name)
    grads = {name: op() for name, op in ops.items()}  # autotunes triton-fa2
    cudnn = grads.pop("sdpa-cudnn")
    diff = max(((a.float() - c.float()).norm() / c.float().norm()).item()
               for g in grads.values() for a, c in zip(g, cudnn, strict=True))
    print(f"B{b} H{h} N{n} d{d}: largest relative difference of dQ, dK, dV to cuDNN {diff:.2e}")
    for op in ops.values():
        time_op(op, device, warmup=10, reps=10)
    medians: dict[str, list[float]] = {name: [] for name in ops}
    for r in range(rounds):
        for name in (list(ops) if r % 2 == 0 else list(ops)[::-1]):
            medians[name].append(statistics.median(time_op(ops[name], device, warmup=3, reps=calls)))
    line = (f"B{b} H{h} N{n} d{d}, {rounds} rounds x {calls} calls: "
            f"cuDNN {statistics.median(medians['sdpa-cudnn']):.3f} ms")
    for name in grads:
        ratios = [t / c for t, c in zip(medians[name], medians["sdpa-cudnn"], strict=True)]
        line += (f", {name} {statistics.median(medians[name]):.3f} ms, "
                 f"ratio median {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")
    print(line, flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:7]), *sys.argv[7:8])
