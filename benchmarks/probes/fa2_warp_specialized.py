"""Experiment: causal FlashAttention forward and dQ kernels whose key loop is warp-specialised.

Triton (3.5+) can split a loop over warps on Hopper: a producer warp issues the TMA loads of K
and V (device-side tensor descriptors) while consumer warp groups compute, so one group's
exponentials can run while another's matrix products do. triton-fa2's forward does one after
the other (its profile: products plus exponentials, no overlap). This probe measures a forward
written that way, with and without `warp_specialize`, against triton-fa2's own forward and
cuDNN, and checks it against SDPA. Sequence length must be a multiple of 128. Only one loop
per kernel compiles with warp specialisation here, so every key block up to the diagonal is
masked; the rows without `warp_specialize` measure what that costs. The dQ kernel (the
backward's loop over key blocks, the forward's shape with three products) is measured the same
way against triton-fa2's autotuned dQ kernel.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa2_warp_specialized.py B H N D [fwd|dq|both]
"""

from __future__ import annotations

import functools
import itertools
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from trainperf.attention import flash_triton as ft


@triton.jit
def _rows_desc(ptr, rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """A descriptor over every head's rows of a [.., HEAD_DIM] tensor, loading BLOCK rows at a time."""
    return tl.make_tensor_descriptor(ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK, HEAD_DIM])


@triton.jit
def _causal(offs_m, start_n, BLOCK_N: tl.constexpr):
    """Which scores of a [rows, BLOCK_N] tile a causal mask keeps."""
    return offs_m[:, None] >= (start_n + tl.arange(0, BLOCK_N))[None, :]


@triton.jit
def _ws_fwd_kernel(Q, K, V, O, L, qk_scale, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, WS: tl.constexpr):
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    rows = tl.num_programs(1) * N_CTX  # every head's rows, one after another
    y = tl.program_id(1) * N_CTX
    desc_k, desc_v = _rows_desc(K, rows, HEAD_DIM, BLOCK_N), _rows_desc(V, rows, HEAD_DIM, BLOCK_N)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = _rows_desc(Q, rows, HEAD_DIM, BLOCK_M).load([y + start_m, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    offset = y
    # one loop over every key block up to the diagonal, masked throughout: the diagonal cannot
    # have a loop of its own next to a warp-specialised one (it fails to compile, Triton 3.6, 3.9)
    for start_n in tl.range(0, start_m + BLOCK_M, BLOCK_N, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        qk = tl.dot(q, desc_k.load([offset, 0]).T)
        qk = qk * qk_scale + tl.where(_causal(offs_m, start_n, BLOCK_N), 0, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([offset, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offset += BLOCK_N
    acc = acc / l_i[:, None]
    _rows_desc(O, rows, HEAD_DIM, BLOCK_M).store([y + start_m, 0], acc.to(O.dtype.element_ty))
    tl.store(L + y + offs_m, m_i + tl.math.log2(l_i))


@triton.jit
def _ws_dq_kernel(Q, K, V, DO, L, Delta, DQ, qk_scale, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WS: tl.constexpr):
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    rows = tl.num_programs(1) * N_CTX
    y = tl.program_id(1) * N_CTX
    desc_k, desc_v = _rows_desc(K, rows, HEAD_DIM, BLOCK_N), _rows_desc(V, rows, HEAD_DIM, BLOCK_N)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = _rows_desc(Q, rows, HEAD_DIM, BLOCK_M).load([y + start_m, 0])
    do = _rows_desc(DO, rows, HEAD_DIM, BLOCK_M).load([y + start_m, 0])
    lse = tl.load(L + y + offs_m)
    delta = tl.load(Delta + y + offs_m)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    offset = y
    for start_n in tl.range(0, start_m + BLOCK_M, BLOCK_N, warp_specialize=WS):
        k = desc_k.load([offset, 0])
        v = desc_v.load([offset, 0])
        s = tl.dot(q, k.T)
        dp = tl.dot(do, v.T)
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        p = tl.where(_causal(offs_m, start_n, BLOCK_N), p, 0.0)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
        offset += BLOCK_N
    tl.store(DQ + (y + offs_m)[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :],
             (dq * sm_scale).to(DQ.dtype.element_ty))


def ws_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_m: int, block_n: int, warps: int,
               stages: int, ws: bool) -> tuple[torch.Tensor, object]:
    b, h, n, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((b * h, n), device=q.device, dtype=torch.float32)
    compiled = _ws_fwd_kernel[(n // block_m, b * h)](q, k, v, o, lse, d ** -0.5 * ft.LOG2E, n, d, block_m,
                                                     block_n, ws, num_warps=warps, num_stages=stages)
    return o, compiled


def ws_dq(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
          delta: torch.Tensor, block_m: int, block_n: int, warps: int, stages: int,
          ws: bool) -> tuple[torch.Tensor, object]:
    b, h, n, d = q.shape
    dq = torch.empty_like(q)
    scale = d ** -0.5
    compiled = _ws_dq_kernel[(n // block_m, b * h)](q, k, v, do, lse, delta, dq, scale * ft.LOG2E, scale, n,
                                                    d, block_m, block_n, ws, num_warps=warps,
                                                    num_stages=stages)
    return dq, compiled


def report(label: str, run: functools.partial, ref: torch.Tensor) -> None:
    """Compile, compare with `ref`, time; a variant that does not compile is a result too."""
    try:
        out, compiled = run()
        err = (out.float() - ref.float()).abs().max().item()
        ms = do_bench(run, warmup=25, rep=200)
    except Exception as e:  # noqa: BLE001
        print(f"{label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        return
    print(f"{label}: {ms:.4f} ms, max |err| {err:.2e}, regs {compiled.n_regs} "
          f"spills {compiled.n_spills} smem {compiled.metadata.shared}", flush=True)


def main_dq(b: int, h: int, n: int, d: int) -> None:
    """The dQ kernel against triton-fa2's, on the gradients of one causal forward."""
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    ft.flash_attention_triton(qr, kr, vr, causal=True).backward(do)
    out = torch.empty_like(q)
    lse = torch.empty((b * h, n), device="cuda", dtype=torch.float32)
    args = ft._launch_args(q)
    ft._fwd_kernel[lambda m: (triton.cdiv(n, m["BLOCK_M"]), b * h)](q, k, v, out, lse, d ** -0.5 * ft.LOG2E,
                                                                    n, CAUSAL=True, **args)
    delta = (out.float() * do.float()).sum(-1).reshape(b * h, n)
    dq = torch.empty_like(q)

    def ours() -> None:
        ft._bwd_dq_kernel[lambda m: (triton.cdiv(n, m["BLOCK_M"]), b * h)](
            q, k, v, out, do, lse, delta, dq, d ** -0.5 * ft.LOG2E, d ** -0.5, n, CAUSAL=True,
            TMA=ft._use_tma(q), **args)
    ours()
    err = (dq.float() - qr.grad.float()).abs().max().item()
    print(f"triton-fa2 dQ kernel (autotuned {ft._bwd_dq_kernel.best_config}): "
          f"{do_bench(ours, warmup=25, rep=200):.4f} ms, max |err| vs autograd dq {err:.2e}", flush=True)
    shapes = [(128, 64, 4, 2), (128, 64, 4, 3), (128, 128, 4, 2), (128, 64, 8, 2), (64, 64, 4, 2)]
    for (bm, bn, w, s), ws in itertools.product(shapes, (False, True)):
        report(f"dq {bm}x{bn} w{w} s{s} ws={ws}",
               functools.partial(ws_dq, q, k, v, do, lse, delta, bm, bn, w, s, ws), qr.grad)


def main(b: int, h: int, n: int, d: int) -> None:
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        cudnn_ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), warmup=25,
                            rep=200)
    ours_ms = do_bench(lambda: ft.flash_attention_triton(q, k, v, causal=True), warmup=25, rep=200)
    print(f"cudnn fwd {cudnn_ms:.4f} ms; triton-fa2 fwd (autotuned) {ours_ms:.4f} ms", flush=True)
    shapes = [(128, 64, 4, 2), (128, 64, 4, 3), (128, 128, 4, 2), (128, 64, 8, 2), (128, 128, 8, 2)]
    for (bm, bn, w, s), ws in itertools.product(shapes, (False, True)):
        report(f"fwd {bm}x{bn} w{w} s{s} ws={ws}", functools.partial(ws_forward, q, k, v, bm, bn, w, s, ws),
               ref)


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:5]]
    which = sys.argv[5] if len(sys.argv) > 5 else "both"
    if which in ("fwd", "both"):
        main(*sizes)
    if which in ("dq", "both"):
        main_dq(*sizes)
