"""Probe: the attention projections' GEMMs of the Llama-3.2-1B step, cuBLAS (what `fast` runs,
through nn.Linear) against quack's autotuned GEMM. usage: python3 proj-gemms.py DEADLINE TOKENS...

Per token count T: the forward (x @ Wᵀ), the input gradient (dy @ W) and the weight gradient
(dyᵀ @ x) of q/o (2048 → 2048) and k/v (2048 → 512), bf16. Each pair is timed in alternating
rounds (CUDA events, 20 calls each) and quack's output is checked against cuBLAS's.
"""

import sys
import time

import torch

from trainperf.kernels.quack_mlp import _load_quack

_load_quack()
from quack.gemm_interface import gemm  # noqa: E402


def timed(fn, n: int = 20) -> float:  # noqa: ANN001
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def cases(t: int, n: int) -> dict:
    """name: (A, B) of A @ B as nn.Linear's forward and backward make them."""
    x, dy = (torch.randn(t, d, device="cuda", dtype=torch.bfloat16) for d in (2048, n))
    w = torch.randn(n, 2048, device="cuda", dtype=torch.bfloat16) * 0.02
    return {f"T={t} N={n} fwd": (x, w.t()), f"T={t} N={n} dx": (dy, w), f"T={t} N={n} dw": (dy.t(), x)}


def compare(name: str, a: torch.Tensor, b: torch.Tensor, dynamic: bool) -> None:
    start = time.time()
    ref = a @ b
    got = gemm(a, b, tuned=True, dynamic_scheduler=dynamic)
    tune_s = time.time() - start
    err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
    rounds = [(timed(lambda: a @ b), timed(lambda: gemm(a, b, tuned=True, dynamic_scheduler=dynamic)))
              for _ in range(3)]
    cublas, quack = (sorted(r[i] for r in rounds)[1] for i in (0, 1))
    print(f"{name:22s} cuBLAS {cublas:.4f} ms ({flops / cublas / 1e9:4.0f} TFLOP/s)  quack {quack:.4f} ms "
          f"({flops / quack / 1e9:4.0f})  speed-up {cublas / quack:.3f}  rel diff {err:.1e}  "
          f"tuned in {tune_s:.0f} s", flush=True)


if __name__ == "__main__":
    deadline = float(sys.argv[1])
    for t in map(int, sys.argv[2:]):
        for n in (2048, 512):
            for name, (a, b) in cases(t, n).items():
                if time.time() > deadline:
                    print("deadline: stopped before", name)
                    sys.exit()
                compare(name, a, b, dynamic=not name.endswith("fwd"))
