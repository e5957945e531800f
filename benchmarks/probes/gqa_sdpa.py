"""Grouped-query attention into SDPA, two ways, at the Llama-3.2-1B attention shapes.

native: K/V keep their 8 heads and SDPA gets enable_gqa=True (what transformers does without a
mask); expanded: repeat_kv to 32 heads first, and autograd sums dK/dV back over each group.
Times forward + backward (the repeat and its backward included) with CUDA events; prints CSV.
Usage: PYTHONPATH=src python3 benchmarks/probes/gqa_sdpa.py [B]x[S] ...
"""

from __future__ import annotations

import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from trainperf.core.timing import time_op

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 64


def fwd_bwd(q, k, v, backend: SDPBackend, expand: bool):  # noqa: ANN001, ANN201
    def run() -> None:
        kk, vv = k, v
        if expand:
            kk, vv = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=not expand)
        o.backward(torch.ones_like(o))
    return run


def main(shapes: list[str]) -> None:
    dev = torch.device("cuda")
    print("backend,kv,batch,seq,median_ms,min_ms")
    for shape in shapes:
        b, s = (int(x) for x in shape.split("x"))
        q = torch.randn(b, HEADS, s, HEAD_DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(b, KV_HEADS, s, HEAD_DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
                for _ in range(2))
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            for expand in (False, True):
                try:
                    ms = time_op(fwd_bwd(q, k, v, backend, expand), dev, warmup=5, reps=30)
                    print(f"{backend.name},{'expanded' if expand else 'native'},{b},{s},"
                          f"{statistics.median(ms):.3f},{min(ms):.3f}", flush=True)
                except RuntimeError as exc:
                    print(f"{backend.name},{'expanded' if expand else 'native'},{b},{s},,,"
                          f"{str(exc).splitlines()[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["1x16384", "2x8192", "24x768"])
