"""Probe: does fast accumulation in the float8 backward products pay in the step?
usage: PYTHONPATH=src python3 benchmarks/probes/float8_fast_backward_step.py DEADLINE_EPOCH SHAPE...

`benchmarks/probes/float8_fast_accum.py` times the MLP's backward products alone, each way. Here the
whole `fp8-trainperf-all` step at each shape is built with its backward products accumulating in
float32 (`all`) and fast (`all-fast`, kernels/float8_mlp.py FAST_BACKWARD), beside torchao's `fp8`
in the same process; each is captured once as a CUDA graph, as the suite runs it, and the three take
turns in three rounds of 10 replays (core/ab_rounds.py): CUDA-event time, energy, clock and power
(the peak memory it prints is the replays' alone: each graph is captured before). Before its capture
each float8 step runs once with its products counted by how they accumulate, so a build that did not
take the setting shows.
"""

import collections
import sys
import time

import torch

from trainperf.core.ab_rounds import alternating_rounds, cases_in_time, summary
from trainperf.kernels import float8_mlp
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 240  # the three steps' first builds at a shape, before one is measured
VARIANTS = {"fp8": ("fp8", False), "all": ("fp8-trainperf-all", False),
            "all-fast": ("fp8-trainperf-all", True)}  # name: (recipe, fast backward)


def products_by_accumulation(step: llama_sdpa.LlamaStep) -> dict[bool, int]:
    """How many of one iteration's trainperf float8 products accumulate fast and how many do not."""
    counts: dict[bool, int] = collections.Counter()
    product = float8_mlp.float8_product

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        counts[args[5] if len(args) > 5 else kwargs.get("fast", False)] += 1
        return product(*args, **kwargs)

    float8_mlp.float8_product = counted
    try:
        step()
        torch.cuda.synchronize()
    finally:
        float8_mlp.float8_product = product
    return dict(counts)


def captured(shape: str, recipe: str, fast: bool) -> tuple[llama_sdpa.LlamaStep, GraphedIteration]:
    float8_mlp.FAST_BACKWARD = fast
    t0 = time.time()
    step = llama_sdpa.recipe_step(recipe, *map(int, shape.split("x")))
    print(f"{shape} {recipe} fast backward {fast}: built in {time.time() - t0:.0f} s, products by "
          f"fast accumulation {products_by_accumulation(step)}", flush=True)
    return step, GraphedIteration(step)


def in_step(shape: str, deadline: float) -> None:
    default = float8_mlp.FAST_BACKWARD
    built = {name: captured(shape, *settings) for name, settings in VARIANTS.items()}
    try:
        results = alternating_rounds({name: lambda g=graph: g for name, (_, graph) in built.items()},
                                     3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
    finally:
        for step, _ in built.values():
            step.close()
        float8_mlp.FAST_BACKWARD = default
    for reference in ("fp8", "all"):
        for line in summary(results, reference):
            print(shape, line, flush=True)


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in cases_in_time(shapes, deadline, BUILD_S):
        in_step(shape, deadline)


if __name__ == "__main__":
    main()
