"""Can FlashAttention 4 run Llama's grouped-query attention with each group's query heads packed
into one longer sequence, so that its backward keeps dK and dV in one program per K/V head?

FA4's Hopper backward accumulates dK/dV in float32 across the query heads of a group (its
`pack_gqa` is forward-only), which costs 15% of the backward at 24 x 768 (`fa4_bwd_configs.py`).
With query head h = j·G + g using K/V head g (G K/V heads), q laid out [batch, seq, heads, dim]
is, as a free view, [batch, seq·(heads/G), G, dim]: row r = pos·(heads/G) + j. That is ordinary
multi-head attention over G heads with seqlen_q = (heads/G)·seqlen_k and the causal mask
k·(heads/G) ≤ r, given as a `mask_mod`, with block sparsity so that masked blocks are skipped.
The packed attention is trainperf's (`attention/fa4_packed.py`, its forward and backward ops).
Checked against FA4's multi-head attention on K/V repeated to every head (the same function);
timed against FA4's grouped-query kernels of the same sizes.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa4_packed_gqa.py [BxS ...]
"""

from __future__ import annotations

import sys

import flash_attn.cute.interface as fa
import torch
import triton

from trainperf.attention.fa4_packed import fa4_packed_attention_backward_op, fa4_packed_attention_op

HEADS, KV_HEADS, DIM = 32, 8, 64
PACK = HEADS // KV_HEADS


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def shape(b: int, s: int) -> None:
    scale = DIM ** -0.5
    q = torch.randn(b, s, HEADS, DIM, device="cuda", dtype=torch.bfloat16)  # head h = j·G + g
    k, v = (torch.randn(b, s, KV_HEADS, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    # reference: every query head h attends K/V head h % G (K/V repeated), plain causal
    ke, ve = (t.repeat(1, 1, PACK, 1) for t in (k, v))
    o_ref, lse_ref, *_ = fa._flash_attn_fwd(q, ke, ve, softmax_scale=scale, causal=True, return_lse=True)
    dq_ref, dk_ref, dv_ref = fa._flash_attn_bwd(q, ke, ve, o_ref, do, lse_ref, scale, True)[:3]
    dk_ref, dv_ref = (t.view(b, s, PACK, KV_HEADS, DIM).sum(2) for t in (dk_ref, dv_ref))

    def packed_fwd():  # noqa: ANN202
        return fa4_packed_attention_op(q, k, v, True, scale)

    op, lsep = packed_fwd()

    def packed_bwd():  # noqa: ANN202
        return fa4_packed_attention_backward_op(do, q, k, v, op, lsep, True, scale)

    dqp, dkp, dvp = packed_bwd()
    print(f"{b}x{s} packed vs repeated K/V: out {rel(op, o_ref):.1e} dq {rel(dqp, dq_ref):.1e} "
          f"dk {rel(dkp, dk_ref):.1e} dv {rel(dvp, dv_ref):.1e}", flush=True)
    o, lse, *_ = fa._flash_attn_fwd(q, k, v, softmax_scale=scale, causal=True, return_lse=True)
    times = {
        "fwd grouped (now)": lambda: fa._flash_attn_fwd(q, k, v, softmax_scale=scale, causal=True,
                                                         return_lse=True),
        "fwd packed": packed_fwd,
        "bwd grouped (now)": lambda: fa._flash_attn_bwd(q, k, v, o, do, lse, scale, True),
        "bwd packed": packed_bwd,
        "bwd K/V repeated": lambda: fa._flash_attn_bwd(q, ke, ve, o_ref, do, lse_ref, scale, True),
    }
    for name, fn in times.items():
        ms = triton.testing.do_bench(fn, warmup=50, rep=400, return_mode="median")
        print(f"{b}x{s} {name:18s} {ms:.4f} ms", flush=True)


def main(shapes: list[str]) -> None:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for s in shapes:
        shape(*map(int, s.split("x")))


if __name__ == "__main__":
    main(sys.argv[1:] or ["24x768", "12x1024", "2x8192"])
