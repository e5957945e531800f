"""Probe: the fastest step with its grouped-query attention packed (`--kv-heads packed`: each K/V
head's query heads as one sequence, attention/fa4_packed.py) against the step as it runs, at the
shapes where alone the packed kernels were faster. usage: PYTHONPATH=src python3
benchmarks/probes/fast_step_packed.py DEADLINE_EPOCH SHAPE...

Per shape both steps are built (each decoder layer compiled, FA4, quack's MLP, the chunked loss),
captured as CUDA graphs as the suite runs them, and take turns in three rounds of 10 replays:
CUDA-event time, energy, clock and power, and the capture's peak memory.
"""

import sys
import time

import torch

from trainperf.core.ab_rounds import alternating_rounds, summary
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 200  # the most one build of the step is expected to take (FA4 and quack compile on first use)


def built(shape: str, kv_heads: str) -> llama_sdpa.LlamaStep:
    t0 = time.time()
    step = llama_sdpa.recipe_step("fast", *map(int, shape.split("x")), kv_heads=kv_heads)
    print(f"{shape} {', '.join(step.swaps)}: built in {time.time() - t0:.0f} s", flush=True)
    return step


def in_step(shape: str, deadline: float) -> None:
    steps = {kv: built(shape, kv) for kv in ("native", "packed")}
    try:
        makers = {kv: (lambda s=s: GraphedIteration(s)) for kv, s in steps.items()}
        results = alternating_rounds(makers, 3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
    finally:
        for step in steps.values():
            step.close()
    for line in summary(results, "native"):
        print(shape, line, flush=True)


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in shapes:
        if time.time() < deadline - 2 * BUILD_S:
            in_step(shape, deadline)
        else:
            print("deadline: skipping", shape, flush=True)


if __name__ == "__main__":
    main()
