"""Is an attention kernel's launch on the host as long as its run on the GPU? Forward and forward +
backward of each named attention at one shape: GPU time per call (its kernels' summed time, from
the profiler) and host time per call (wall clock without synchronising: the CPU's share). Where
host ≥ GPU, a step built of such calls runs at the host's pace unless replayed as a graph.
Usage: PYTHONPATH=src python3 benchmarks/probes/attention_host_time.py [B H N D [names]]
(default: the cs336-8b step's attention on one rank, 1 32 32768 128, fa4 and sdpa-cudnn)
"""

from __future__ import annotations

import sys

import torch

from trainperf.attention.registry import get_attention
from trainperf.core.timing import kernel_and_host_ms


def main() -> None:
    b, h, n, d = (int(x) for x in sys.argv[1:5]) if len(sys.argv) > 4 else (1, 32, 32768, 128)
    names = sys.argv[5].split(",") if len(sys.argv) > 5 else ["fa4", "sdpa-cudnn"]
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for _ in range(3))
    dout = torch.randn_like(q)
    for name in names:
        attn = get_attention(name, q.device)
        for _ in range(3):  # compiles and first calls
            attn(q, k, v, causal=True).backward(dout)
        fwd = kernel_and_host_ms(lambda: attn(q, k, v, causal=True), q.device)  # noqa: B023
        both = kernel_and_host_ms(lambda: attn(q, k, v, causal=True).backward(dout), q.device)  # noqa: B023
        print(f"{name} B{b} H{h} N{n} d{d}: forward {fwd[0]:.2f} ms GPU, {fwd[1]:.2f} ms host; "
              f"forward + backward {both[0]:.2f} ms GPU, {both[1]:.2f} ms host", flush=True)


if __name__ == "__main__":
    main()
