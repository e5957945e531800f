"""Can FlashAttention 4 run Llama's grouped-query attention with each group's query heads packed
into one longer sequence, so that its backward keeps dK and dV in one program per K/V head?

FA4's Hopper backward accumulates dK/dV in float32 across the query heads of a group (its
`pack_gqa` is forward-only), which costs 15% of the backward at 24 x 768 (`fa4_bwd_configs.py`).
With query head h = j·G + g using K/V head g (G K/V heads), q laid out [batch, seq, heads, dim]
is, as a free view, [batch, seq·(heads/G), G, dim]: row r = pos·(heads/G) + j. That is ordinary
multi-head attention over G heads with seqlen_q = (heads/G)·seqlen_k and the causal mask
k·(heads/G) ≤ r, given as a `mask_mod`, with block sparsity so that masked blocks are skipped.
Checked against FA4's multi-head attention on K/V repeated to every head (the same function);
timed against FA4's grouped-query backward of the same sizes.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa4_packed_gqa.py [BxS ...]
"""

from __future__ import annotations

import sys

import cutlass.cute as cute
import flash_attn.cute.interface as fa
import torch
import triton
from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch

HEADS, KV_HEADS, DIM = 32, 8, 64
PACK = HEADS // KV_HEADS
BLOCK_Q, BLOCK_K = 192, 128  # the forward's default tile for head dim 64; the backward's is 128 x 128


@cute.jit
def packed_causal(batch, head, m_idx, n_idx, seqlen_info, aux_tensors):  # noqa: ANN001, ANN201
    return n_idx * PACK <= m_idx


def sparsity(b: int, seq_q: int, seq_k: int, backward: bool) -> BlockSparseTensorsTorch:
    """Which key blocks each query block meets (forward), or which query blocks each key block
    meets (backward), split into partly masked and full: blocks of the kernel's tile."""
    bq = BLOCK_K if backward else BLOCK_Q
    m = torch.arange(-(-seq_q // bq))[:, None]
    n = torch.arange(-(-seq_k // BLOCK_K))[None, :]
    last = torch.clamp(m * bq + bq - 1, max=seq_q - 1)
    full = (n * BLOCK_K + BLOCK_K - 1) * PACK <= m * bq  # every key visible to every row
    some = n * BLOCK_K * PACK <= last  # some key visible to some row
    partial = some & ~full
    if backward:
        partial, full = partial.t(), full.t()

    def packed(sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cnt = sel.sum(1).to(torch.int32)
        idx = torch.argsort((~sel).to(torch.int8), dim=1, stable=True).to(torch.int32)
        shape = (b, KV_HEADS)
        return (cnt.expand(*shape, -1).contiguous().cuda(),
                idx.expand(*shape, *idx.shape).contiguous().cuda())

    mcnt, midx = packed(partial)
    fcnt, fidx = packed(full)
    return BlockSparseTensorsTorch(mcnt, midx, fcnt, fidx, block_size=(bq, BLOCK_K))


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def shape(b: int, s: int) -> None:
    scale = DIM ** -0.5
    q = torch.randn(b, s, HEADS, DIM, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, KV_HEADS, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    qp, dop = (t.view(b, s * PACK, KV_HEADS, DIM) for t in (q, do))  # head h = j·G + g, the free view
    fwd_sp, bwd_sp = sparsity(b, s * PACK, s, False), sparsity(b, s * PACK, s, True)
    # reference: every query head h attends K/V head h % G (K/V repeated), plain causal
    ke, ve = (t.repeat(1, 1, PACK, 1) for t in (k, v))
    o_ref, lse_ref, *_ = fa._flash_attn_fwd(q, ke, ve, softmax_scale=scale, causal=True, return_lse=True)
    dq_ref, dk_ref, dv_ref = fa._flash_attn_bwd(q, ke, ve, o_ref, do, lse_ref, scale, True)[:3]
    dk_ref, dv_ref = (t.view(b, s, PACK, KV_HEADS, DIM).sum(2) for t in (dk_ref, dv_ref))
    try:
        def packed_fwd():  # noqa: ANN202
            return fa._flash_attn_fwd(qp, k, v, softmax_scale=scale, causal=False, mask_mod=packed_causal,
                                      block_sparse_tensors=fwd_sp, return_lse=True)

        op, lsep, *_ = packed_fwd()

        def packed_bwd():  # noqa: ANN202
            return fa._flash_attn_bwd(qp, k, v, op, dop, lsep, scale, False, mask_mod=packed_causal,
                                      block_sparse_tensors=bwd_sp)[:3]

        dqp, dkp, dvp = packed_bwd()
    except Exception as exc:  # noqa: BLE001 — an unsupported path is the finding
        print(f"{b}x{s} packed failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", flush=True)
        raise
    print(f"{b}x{s} packed vs repeated K/V: out {rel(op.view(b, s, HEADS, DIM), o_ref):.1e} "
          f"dq {rel(dqp.view(b, s, HEADS, DIM), dq_ref):.1e} dk {rel(dkp, dk_ref):.1e} "
          f"dv {rel(dvp, dv_ref):.1e}", flush=True)
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
