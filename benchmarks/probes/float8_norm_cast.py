"""Is the RMSNorm inside the float8 cast faster than the norm and the cast apart, kernel for kernel?

kernels/float8_norm.py adds the residual, normalises and casts (with the transpose and amax) in one
kernel; apart, Inductor's kernel adds and normalises (writing the sum and the bf16 normalised
tensor) and trainperf's cast reads the latter back. Both are timed at the Llama-3.2-1B step's
shapes, with and without the residual, the fused kernel at a few row-block shapes and warp counts
(TILE first), in alternating rounds (median of each); the fused outputs are checked against the
apart ones.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_norm_cast.py [tokens,...] [width] [rounds]
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton

from trainperf.kernels import float8_mlp as mlp
from trainperf.kernels import float8_norm, llama_rmsnorm

BLOCKS = ((mlp.TILE[0], mlp.TILE[1], mlp.WARPS), (32, 128, 4), (16, 128, 4), (32, 256, 8), (16, 256, 4))
EPS = 1e-5


def fused(x, residual, weight, state, bm, bn, warps):  # noqa: ANN001, ANN201
    m, n = x.shape
    s = torch.empty_like(x) if residual is not None else x
    y, yt = mlp.with_transpose(m, n, mlp.E4M3, x.device)
    float8_norm._norm_cast_kernel[(triton.cdiv(m, bm),)](
        x, residual if residual is not None else x, s, weight, y, yt, state.scale, state.now, m, n, EPS,
        HAS_RESIDUAL=residual is not None, FMAX=mlp.float8_max(mlp.E4M3), BM=bm, BN=bn, num_warps=warps)
    return s, y, yt


def cases_at(m: int, width: int, with_residual: bool) -> dict:
    """The apart form and the fused one at each of BLOCKS, on one draw of inputs."""
    torch.manual_seed(0)
    x = torch.randn(m, width, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn_like(x) if with_residual else None
    weight = (1 + torch.randn(width, device="cuda") / 4).bfloat16()
    state = mlp.ScaleState(x.device)
    summed = x if residual is None else x + residual
    state.next(mlp.X, mlp.E4M3, llama_rmsnorm.rms_norm_reference(summed, weight, EPS))
    norm = torch.compile(lambda s, w: llama_rmsnorm.rms_norm_reference(s, w, EPS))
    add_norm = torch.compile(lambda x, r, w: (x + r, llama_rmsnorm.rms_norm_reference(x + r, w, EPS)))

    def apart():  # noqa: ANN202
        s, n = add_norm(x, residual, weight) if with_residual else (x, norm(x, weight))
        return (s, *mlp.scale_and_cast(n, state.tensors(), mlp.X, mlp.E4M3))

    cases = {"apart": apart}
    for bm, bn, warps in BLOCKS:
        cases[f"fused {bm}x{bn} w{warps}"] = (
            lambda b=(bm, bn, warps): fused(x, residual, weight, state, *b))
    return cases


def main() -> None:
    tokens = [int(t) for t in (sys.argv[1] if len(sys.argv) > 1 else "12288,16384").split(",")]
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for m in tokens:
        for with_residual in (False, True):
            cases = cases_at(m, width, with_residual)
            ref = cases["apart"]()
            for name, case in cases.items():
                got = case()
                differ = (got[1].view(torch.uint8) != ref[1].view(torch.uint8)).float().mean().item()
                same_t = torch.equal(got[2].view(torch.uint8), got[1].t().view(torch.uint8))
                same_s = (not with_residual) or torch.equal(got[0], ref[0])
                print(f"{m}x{width} residual={with_residual} {name}: casts differing {differ:.1e}, "
                      f"transpose ok {same_t}, sum ok {same_s}", flush=True)
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(rounds):
                for name, case in cases.items():
                    times[name].append(triton.testing.do_bench(case, warmup=10, rep=50))
            base = statistics.median(times["apart"])
            moved = m * width * (2 * (3 if with_residual else 1) + 2)  # bytes the fused kernel must move
            for name, ms in times.items():
                med = statistics.median(ms)
                print(f"{m}x{width} residual={with_residual} {name:>18}: {med * 1e3:7.1f} us "
                      f"({base / med:.2f}x apart, fused bytes at {moved / med / 1e6:.0f} GB/s)", flush=True)


if __name__ == "__main__":
    main()
