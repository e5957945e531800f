"""Grouped-query attention through FlashAttention 4 with each K/V head's query heads packed into
one sequence (`--kv-heads packed`).

FA4's Hopper backward accumulates dK and dV in float32 across the query heads that share a K/V
head, and converts them afterwards; at short sequences that is about 15% of its time (0.69 against
0.58 ms a layer for Llama-3.2-1B at 24 × 768, docs/peers.md). With the query heads ordered so
that head j·G + g uses K/V head g (G K/V heads, R = heads / G query heads each), q laid out
[batch, seq, heads, dim] is, as a free view, [batch, R·seq, G, dim]: row r = pos·R + j. FA4 then
runs multi-head attention over G heads, each program keeps dK and dV for all R query heads, and
the causal mask is a `mask_mod` (key k is visible to row r where R·k ≤ r) with block sparsity, so
that masked blocks are skipped as causal attention skips them.

The head order is the model's: `hf_llama.pack_query_heads` permutes q_proj's rows and o_proj's
columns once, an exact relabelling of the heads.
"""

from __future__ import annotations

import functools

import torch

from trainperf.attention.op_autograd import register_attention_autograd

BLOCK_K = 128  # key rows of a tile, forward and backward (FA4's choice for head dim 64 on Hopper)
BLOCK_Q_FORWARD = 192  # query rows of the forward's tile for head dim up to 64; 128 above
BLOCK_Q_BACKWARD = 128


def visible_blocks(seq_q: int, seq_k: int, pack: int, block_q: int, block_k: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """For [query block, key block]: (partly visible, fully visible) under the packed causal mask,
    where key k is visible to query row r if pack·k ≤ r. Blocks in neither are skipped."""
    m = torch.arange(-(-seq_q // block_q))[:, None]
    n = torch.arange(-(-seq_k // block_k))[None, :]
    first, last = m * block_q, torch.clamp(m * block_q + block_q - 1, max=seq_q - 1)
    last_key = torch.clamp(n * block_k + block_k - 1, max=seq_k - 1)
    full = last_key * pack <= first
    some = n * block_k * pack <= last
    return some & ~full, full


def _packed_lists(sel: torch.Tensor, batch: int, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FA4's block lists of one selection [rows, cols]: per row its count and its column indices,
    the selected ones first in order, for every batch and head."""
    count = sel.sum(1).to(torch.int32)
    index = torch.argsort((~sel).to(torch.int8), dim=1, stable=True).to(torch.int32)
    return (count.expand(batch, heads, -1).contiguous(),
            index.expand(batch, heads, *index.shape).contiguous())


@functools.cache
def _sparsity(batch: int, seq: int, kv_heads: int, pack: int, head_dim: int, backward: bool,
              device: torch.device):  # noqa: ANN202
    """FA4's block-sparsity tensors for the packed causal mask: forward by query block, backward
    by key block. Built once per shape (before any CUDA graph captures the step)."""
    from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch

    block_q = BLOCK_Q_BACKWARD if backward or head_dim > 64 else BLOCK_Q_FORWARD
    partial, full = visible_blocks(pack * seq, seq, pack, block_q, BLOCK_K)
    if backward:
        partial, full = partial.t(), full.t()
    lists = [t.to(device) for sel in (partial, full) for t in _packed_lists(sel, batch, kv_heads)]
    return BlockSparseTensorsTorch(*lists, block_size=(block_q, BLOCK_K))


@functools.cache
def _mask(pack: int):  # noqa: ANN202
    """The packed causal `mask_mod` for `pack` query heads per K/V head (a CuTe function)."""
    import cutlass.cute as cute

    @cute.jit
    def packed_causal(batch, head, m_idx, n_idx, seqlen_info, aux_tensors):  # noqa: ANN001, ANN202
        return n_idx * pack <= m_idx

    return packed_causal


def _packed(t: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[batch, seq, heads, dim] as [batch, pack·seq, kv_heads, dim] (a view)."""
    b, s, h, d = t.shape
    return t.view(b, s * (h // kv_heads), kv_heads, d)


@torch.library.custom_op("trainperf::fa4_packed_attention", mutates_args=())
def fa4_packed_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                            scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Output [batch, seq, heads, dim] and the log-sum-exp [batch, kv_heads, pack·seq] (float32)
    of causal attention where query head j·G + g uses K/V head g; q, k, v [batch, seq, heads, dim]."""
    from flash_attn.cute.interface import _flash_attn_fwd

    b, s, h, d = q.shape
    g = k.shape[2]
    out, lse, *_ = _flash_attn_fwd(_packed(q, g), k, v, softmax_scale=scale, causal=False,
                                   mask_mod=_mask(h // g), return_lse=True,
                                   block_sparse_tensors=_sparsity(b, s, g, h // g, d, False, q.device))
    return out.view(b, s, h, d), lse


@fa4_packed_attention_op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
      scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    b, s, h, _ = q.shape
    g = k.shape[2]
    return q.new_empty(b, s, h, v.shape[-1]), q.new_empty(b, g, s * (h // g), dtype=torch.float32)


@torch.library.custom_op("trainperf::fa4_packed_attention_backward", mutates_args=())
def fa4_packed_attention_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                     o: torch.Tensor, lse: torch.Tensor, causal: bool,
                                     scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of the packed attention: dK and dV kept whole in each K/V head's programs."""
    from flash_attn.cute.interface import _flash_attn_bwd

    b, s, h, d = q.shape
    g = k.shape[2]
    dq, dk, dv = _flash_attn_bwd(_packed(q, g), k, v, _packed(o, g), _packed(do.contiguous(), g), lse, scale,
                                 False, mask_mod=_mask(h // g),
                                 block_sparse_tensors=_sparsity(b, s, g, h // g, d, True, q.device))[:3]
    return dq.view(b, s, h, d), dk, dv


register_attention_autograd(fa4_packed_attention_op, fa4_packed_attention_backward_op)


def fa4_packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                         scale: float | None = None) -> torch.Tensor:
    """Causal attention of q [batch, heads, seq, dim] (head j·G + g uses K/V head g) over k, v
    [batch, G, seq, dim], as views of [batch, seq, heads, dim] tensors."""
    from trainperf.attention.fa4 import check_fa4_inputs

    scale = check_fa4_inputs(q, k, v, scale)
    if not causal:
        raise ValueError("the packed attention is causal only")
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q = q.contiguous()  # the packed view needs q whole; k and v as FA4 takes them
    k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (k, v))
    return fa4_packed_attention_op(q, k, v, True, scale)[0].transpose(1, 2)
