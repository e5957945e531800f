"""Does the amax's atomic cost the float8 casts their bandwidth?

Each program of trainperf's float8 cast kernels (kernels/float8_mlp.py) folds its tile's amax into
one float32 with an atomic max. Triton's atomics default to acquire-release semantics, which fence
the program's memory traffic around the atomic; the amax is read only by later kernels, so relaxed
ordering suffices. The plain cast is timed as trainperf ships it (`trainperf`), with the atomic at
Triton's default ordering (`acq_rel`, the base of the ratios), relaxed (`relaxed`) and with no
amax at all (`none`, the floor), on the tensors of the Llama-3.2-1B step: one layer's weights and
its activations at 12 x 1024 and 1 x 16384 tokens. Each form runs as a CUDA graph of back-to-back
launches, as in the replayed step, in alternating rounds (median per launch); the forms' float8
outputs and amax are checked equal first.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_cast_atomics.py [rounds]
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl

from trainperf.kernels import float8_mlp as mlp
from trainperf.kernels.float8_mlp import store_float8, tile_of, transpose_back

SHAPES = {"w_qkv": (3072, 2048), "w_o": (2048, 2048), "w_gate_up": (16384, 2048), "w_down": (2048, 8192),
          "x 12x1024": (12288, 2048), "dy_qkv 12x1024": (12288, 3072), "x 1x16384": (16384, 2048),
          "dy_qkv 1x16384": (16384, 3072)}
LAUNCHES = 20  # per graph


@triton.jit
def _cast_amax_as(X, Y, YT, SCALE, AMAX, M, N, FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  SEM: tl.constexpr):
    """mlp._cast_kernel with its atomic at ordering SEM, or no amax where SEM is "none"."""
    scale = tl.load(SCALE)
    r, c, mask = tile_of(M, N, BM, BN, False)
    x = tl.load(X + r * N + c, mask=mask, other=0.0).to(tl.float32)
    if SEM != "none":
        tl.atomic_max(AMAX, tl.max(tl.max(tl.where(mask, tl.abs(x), 0.0), 1), 0), sem=SEM)
    store_float8(x, Y, r * N + c, mask, scale, FMAX)
    transpose_back(Y, YT, M, N, N, M, BM, BN)


def cast_form(sem: str):  # noqa: ANN201
    """A launcher of the plain cast with its amax at `sem` ("trainperf": the kernel trainperf ships)."""
    kernel, extra = (mlp._cast_kernel, {}) if sem == "trainperf" else (_cast_amax_as, {"SEM": sem})

    def launch(x: torch.Tensor, y: torch.Tensor, yt: torch.Tensor, scale: torch.Tensor,
               amax: torch.Tensor) -> None:
        m, n = x.shape
        kernel[mlp.tile_grid(m, n)](x, y, yt, scale, amax, m, n, FMAX=mlp.float8_max(mlp.E4M3),
                                    BM=mlp.TILE[0], BN=mlp.TILE[1], num_warps=mlp.WARPS, **extra)
    return launch


FORMS = {"trainperf": cast_form("trainperf"), "acq_rel": cast_form("acq_rel"),
         "relaxed": cast_form("relaxed"), "none": cast_form("none")}


def buffers(shape: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(shape, device="cuda", dtype=mlp.E4M3)
    return x, y, torch.empty(shape[::-1], device="cuda", dtype=mlp.E4M3), \
        torch.full((1,), 50.0, device="cuda"), torch.zeros(1, device="cuda")


def check(shape: tuple[int, int]) -> None:
    """Every form writes what trainperf's kernel writes, and the same amax unless it takes none."""
    ref = None
    for name, launch in FORMS.items():
        bufs = buffers(shape) if ref is None else (ref[0], *(torch.empty_like(b) for b in ref[1:3]),
                                                   ref[3], torch.zeros(1, device="cuda"))
        launch(*bufs)
        if ref is None:
            ref = bufs
            continue
        same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                   for a, b in zip(ref[1:3], bufs[1:3], strict=True))
        amax_same = name == "none" or torch.equal(ref[4], bufs[4])
        print(f"{name:10s} {shape}: outputs {'equal' if same else 'DIFFER'}, amax "
              f"{'equal' if amax_same else 'DIFFERS'}", flush=True)


def graph_of(launch, bufs: tuple[torch.Tensor, ...]) -> torch.cuda.CUDAGraph:  # noqa: ANN001
    launch(*bufs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            launch(*bufs)
    return graph


def per_launch_ms(graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / LAUNCHES


def medians_in_rounds(graphs: dict[str, torch.cuda.CUDAGraph], rounds: int) -> dict[str, float]:
    """Each graph's median milliseconds per launch over `rounds` alternating rounds."""
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(rounds):
        for name, graph in graphs.items():
            times[name].append(per_launch_ms(graph))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(rounds: int = 7) -> None:
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for label, shape in SHAPES.items():
        check(shape)
        bufs = buffers(shape)
        medians = medians_in_rounds({name: graph_of(launch, bufs) for name, launch in FORMS.items()}, rounds)
        moved = bufs[0].numel() * 4  # bf16 in, float8 and its transpose out
        base = medians["acq_rel"]
        for name, ms in medians.items():
            print(f"  {label:15s} {str(shape):14s} {name:10s} {ms * 1e3:8.1f} us  "
                  f"{moved / ms / 1e9:5.2f} TB/s  {base / ms:5.3f}x", flush=True)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
