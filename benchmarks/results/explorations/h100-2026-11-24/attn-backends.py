"""Probe: FlashAttention 4, the cuDNN frontend's SDPA and PyTorch's cuDNN SDPA at the step's shapes.
usage: python3 attn-backends.py DEADLINE_EPOCH BATCHxSEQ...

Causal bf16 attention with 32 query heads, 8 K/V heads and head dim 64, q, k, v laid out
[batch, seq, heads, dim] as the Llama step makes them. Each implementation's forward and forward +
backward (through autograd, as the step calls them) is timed in alternating rounds (CUDA events,
10 calls each), and its outputs and gradients are checked against FA4's.
"""

import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from trainperf.attention.cudnn_fe import cudnn_attention
from trainperf.attention.fa4 import fa4_attention


def sdpa_cudnn(q, k, v, causal=True, scale=None):  # noqa: ANN001, ANN201
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)


IMPLS = {"fa4": fa4_attention, "cudnn-fe": cudnn_attention, "sdpa-cudnn": sdpa_cudnn}


def timed(fn, n: int = 10) -> float:  # noqa: ANN001
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def probe_shape(b: int, s: int) -> None:
    torch.manual_seed(0)
    q = torch.randn(b, s, 32, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    k, v = (torch.randn(b, s, 8, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
            for _ in range(2))
    do = torch.randn(b, s, 32, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    flops = 4 * s * s * 64 * 32 * b / 2  # causal forward

    def fwd(impl):  # noqa: ANN001, ANN202
        with torch.no_grad():
            return impl(q, k, v, causal=True)

    def fwd_bwd(impl):  # noqa: ANN001, ANN202
        out = impl(q, k, v, causal=True)
        return torch.autograd.grad(out, (q, k, v), do)

    ref = (fwd(fa4_attention), *fwd_bwd(fa4_attention))
    for name, impl in IMPLS.items():
        try:
            got = (fwd(impl), *fwd_bwd(impl))
        except Exception as exc:  # noqa: BLE001
            print(f"{b}x{s} {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        err = max((a.float() - r.float()).abs().max().item() for a, r in zip(got, ref, strict=True))
        rounds = [(timed(lambda i=impl: fwd(i)), timed(lambda i=impl: fwd_bwd(i))) for _ in range(3)]
        f_ms, fb_ms = (sorted(r[i] for r in rounds)[1] for i in (0, 1))
        print(f"{b}x{s} {name:11s} fwd {f_ms:7.3f} ms ({flops / f_ms / 1e9:4.0f} TFLOP/s)  "
              f"fwd+bwd {fb_ms:7.3f} ms ({3.5 * flops / fb_ms / 1e9:4.0f} TFLOP/s)  "
              f"max diff from fa4 {err:.2e}", flush=True)


if __name__ == "__main__":
    deadline = float(sys.argv[1])
    print(torch.cuda.get_device_name(), torch.__version__, "cuDNN", torch.backends.cudnn.version(),
          flush=True)
    for shape in sys.argv[2:]:
        if time.time() > deadline:
            print("deadline: stopped before", shape)
            break
        probe_shape(*map(int, shape.split("x")))
