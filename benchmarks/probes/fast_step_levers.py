"""Probe: the fastest step with its loss and attention settings changed one at a time, at the shapes
where its lead is smallest. usage: PYTHONPATH=src python3 benchmarks/probes/fast_step_levers.py
DEADLINE_EPOCH SHAPE...

Per shape the `fast` step is built once (each decoder layer compiled, FA4, quack's MLP, the
chunked loss) and captured as a CUDA graph once per variant, as the suite runs it; the variants
take turns in three rounds of 10 replays: CUDA-event time, energy, clock and power (GpuMonitor),
and the capture's peak memory.
- `now`: the step as trainperf runs it.
- `rows2048`, `rows4096`: logits blocks of 2,048 or 4,096 rows instead of the default 8,192 (more
  read-modify-writes of the head-weight gradient, a quarter or half of the block's memory).
- `foreach-scale`: the chunked loss's backward scales its stored gradients in one
  `_foreach_mul_` pass even when the incoming gradient is 1, instead of the kernel that skips it.
- `dqswap`: FA4's Hopper backward with dQ's MMA swapped (BwdConfig 128x128, dQ_swapAB).
"""

import functools
import sys
import time

import torch
from flash_attn.cute import interface as fa

from trainperf.core.ab_rounds import alternating_rounds, summary
from trainperf.kernels import chunked_loss
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 180
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
    "rows4096": (4096, False, False),
    "foreach-scale": (None, True, False),
    "dqswap": (None, False, True),
}


def variant(step: llama_sdpa.LlamaStep, rows: int | None, foreach: bool, dqswap: bool):  # noqa: ANN201
    """The maker of one variant: sets the step's loss and FA4's backward tile, captures the graph."""
    def make() -> GraphedIteration:
        step.hidden_loss = functools.partial(chunked_loss.chunked_lm_loss, chunk=rows)
        use_loss_backward(foreach)
        fa._tile_size_bwd_sm90 = (lambda *a, **k: DQSWAP) if dqswap else DEFAULT_BWD
        return GraphedIteration(step)
    return make


def in_step(shape: str, deadline: float) -> None:
    t0 = time.time()
    step = llama_sdpa.recipe_step("fast", *map(int, shape.split("x")))
    step()
    print(f"{shape} {', '.join(step.swaps)}: built in {time.time() - t0:.0f} s", flush=True)
    makers = {name: variant(step, *settings) for name, settings in VARIANTS.items()}
    try:
        results = alternating_rounds(makers, 3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
    finally:
        use_loss_backward(False)
        fa._tile_size_bwd_sm90 = DEFAULT_BWD
        step.close()
    for line in summary(results, "now"):
        print(shape, line, flush=True)


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in shapes:  # a shape starts only with time left to build its step (up to 3 minutes)
        if time.time() < deadline - BUILD_S:
            in_step(shape, deadline)
        else:
            print("deadline: skipping", shape, flush=True)


if __name__ == "__main__":
    main()
