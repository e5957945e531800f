"""A whole training iteration captured once as a CUDA graph and replayed.

Eager, every kernel of the step is its own launch: about a thousand per Llama iteration, each
leaving the GPU a few microseconds between kernels, and host-side work (Python, the CuTe DSL's
argument packing) that the GPU waits for wherever the host falls behind. A replayed graph launches
the same kernels in the same order with the same inputs, so the numerics do not change; only the
gaps go. The step must be static: fixed shapes, no host reads of device values, its inputs in
tensors it reuses. And no tensor of an earlier eager iteration may hold on to its autograd graph
(a loss kept undetached does): that graph's AccumulateGrad nodes were made on the eager stream,
and the captured backward would run them there, which the capture refuses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

SIDE_STREAM_WARMUP = 2  # iterations on the capture's side stream first (cuBLAS workspaces, lazy inits)


class GraphedIteration:
    """`iteration()` captured once; calling this replays it and returns the captured output (a
    tensor the replays overwrite). Capturing runs the iteration `warmup + 1` times.

    Across processes (NCCL collectives in the iteration) the capture is thread-local: NCCL's
    watchdog thread queries its events while this thread captures, which a global capture refuses.
    The capture runs on the warm-up's stream (`stream`, or a new one), so the autograd state those
    iterations made lazily (AccumulateGrad nodes) belongs to the stream the graph records; state
    made before them (DDP's hold on every parameter's AccumulateGrad node) must be made on
    `stream` too."""

    def __init__(self, iteration: Callable[[], torch.Tensor], warmup: int = SIDE_STREAM_WARMUP,
                 thread_local: bool = False, stream: torch.cuda.Stream | None = None) -> None:
        side = stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                iteration()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        mode = "thread_local" if thread_local else "global"
        with torch.cuda.graph(self.graph, stream=side, capture_error_mode=mode):
            self.output = iteration()

    def __call__(self) -> torch.Tensor:
        self.graph.replay()
        return self.output
