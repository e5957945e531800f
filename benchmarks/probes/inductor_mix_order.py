"""Probe: what does Inductor's mix-order reduction cost in the step, and which split pays?
usage: PYTHONPATH=src python3 benchmarks/probes/inductor_mix_order.py DEADLINE_EPOCH RECIPE
       SHAPE[:VARIANT,...]... (every variant where a shape names none)

In each compiled decoder layer's backward, Inductor fuses the RMSNorm's row reduction (dx) with its
column reduction (dweight) into one kernel that writes a float32 partial sum per split of
`split_size` rows, then sums the partials with an aten `sum(dim=0)` outside any Triton kernel: at
12 x 1024 on an H200 the default split of 16 rows leaves a [768, 2048] sum, 31 of them a step.
First the final sum alone at each split's partial shape, as a CUDA graph of back-to-back launches;
then the recipe's step compiled with each variant, captured as a CUDA graph, in alternating rounds:
- `default`: Inductor's split (SMs x 8 splits, rows a split a power of two from 16 to 128)
- `split32`, `split64`, `split128`: that many rows a split
- `autotune`: Inductor benchmarks the split (the fused kernel alone, not the final sum)
- `off`: no mix-order reduction (the row and the column reductions in kernels of their own)
"""

import sys
import time

import torch
import triton

from trainperf.core.ab_rounds import cases_in_time, graphs_in_rounds, summary
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 150  # one variant's compile and capture at a shape
HIDDEN = 2048  # Llama-3.2-1B's
VARIANTS = {
    "default": {},
    "split32": {"triton.mix_order_reduction_split_size": 32},
    "split64": {"triton.mix_order_reduction_split_size": 64},
    "split128": {"triton.mix_order_reduction_split_size": 128},
    "autotune": {"triton.mix_order_reduction_autotune_split_size": True},
    "off": {"triton.mix_order_reduction": False},
}


def final_sums(rows: int) -> None:
    """Microseconds of the partials' aten sum at each split size, as Inductor launches it."""
    for split in (16, 32, 64, 128):
        partial = torch.randn(triton.cdiv(rows, split), HIDDEN, device="cuda")
        graph = torch.cuda.CUDAGraph()
        partial.sum(0)
        with torch.cuda.graph(graph):
            for _ in range(20):
                partial.sum(0)
        ms = triton.testing.do_bench(graph.replay, warmup=20, rep=200) / 20
        print(f"{rows} rows, split {split}: sum of {list(partial.shape)} {ms * 1e3:.1f} us", flush=True)


def captured(recipe: str, shape: str, variant: str) -> tuple[llama_sdpa.LlamaStep, GraphedIteration]:
    t0 = time.time()
    with torch._inductor.config.patch(VARIANTS[variant]):
        step = llama_sdpa.recipe_step(recipe, *map(int, shape.split("x")))
    print(f"{shape} {recipe} {variant}: built in {time.time() - t0:.0f} s", flush=True)
    return step, GraphedIteration(step)


def in_step(recipe: str, shape: str, names: list[str], deadline: float) -> None:
    built = {}
    for name in names:
        if time.time() > deadline - BUILD_S:
            print(f"deadline: {name} not built", flush=True)
            break
        torch._dynamo.reset()
        built[name] = captured(recipe, shape, name)
    results = graphs_in_rounds(built, deadline)
    for line in summary(results, "default") if "default" in results else ():
        print(shape, recipe, line, flush=True)


def main() -> None:
    deadline, recipe, shapes = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in shapes:
        batch, seq = map(int, shape.partition(":")[0].split("x"))
        final_sums(batch * seq)
    for arg in cases_in_time(shapes, deadline, BUILD_S):
        shape, _, names = arg.partition(":")
        in_step(recipe, shape, names.split(",") if names else list(VARIANTS), deadline)


if __name__ == "__main__":
    main()
