"""Attention as cuDNN-frontend SDPA graphs (`cudnn-fe`): forward (saving the softmax statistics)
and backward, built once per shape, stride and dtype, as PyTorch custom ops with autograd and fake
implementations.

It calls cuDNN the way PyTorch's `sdpa-cudnn` backend does, minus PyTorch's dispatch: set side by
side, the two show what that dispatch adds or loses. K/V may have fewer heads than Q (grouped-query
attention runs natively, without repeating K/V). The output is laid out [batch, seq, heads, dim] in
memory (a [batch, heads, seq, dim] view of it), so the usual transpose back costs no copy.
"""

from __future__ import annotations

import math

import torch

from trainperf.attention.op_autograd import register_attention_autograd
from trainperf.kernels import cudnn_graphs as cg

Q, K, V, O, STATS, DO, DQ, DK, DV = range(1, 10)


def _causal(causal: bool) -> dict:
    import cudnn

    if not causal:
        return {}
    return {"diagonal_alignment": cudnn.diagonal_alignment.TOP_LEFT, "diagonal_band_right_bound": 0}


def _forward_graph(q, k, v, o, stats, causal: bool, scale: float):  # noqa: ANN001
    import cudnn

    g = cg.new_graph(q.device, q.dtype)
    out, st = g.sdpa(name="sdpa", q=cg.declare(g, Q, "q", q), k=cg.declare(g, K, "k", k),
                     v=cg.declare(g, V, "v", v), generate_stats=True, attn_scale=scale, **_causal(causal))
    out.set_uid(O).set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    out.set_data_type(cg.io_type(q.dtype))
    st.set_uid(STATS).set_output(True).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
    st.set_data_type(cudnn.data_type.FLOAT)
    return g


def _backward_graph(do, q, k, v, o, stats, dq, dk, dv, causal: bool, scale: float):  # noqa: ANN001
    g = cg.new_graph(q.device, q.dtype)
    grads = g.sdpa_backward(name="sdpa_bwd", q=cg.declare(g, Q, "q", q), k=cg.declare(g, K, "k", k),
                            v=cg.declare(g, V, "v", v), o=cg.declare(g, O, "o", o),
                            dO=cg.declare(g, DO, "dO", do), stats=cg.declare(g, STATS, "stats", stats),
                            attn_scale=scale, **_causal(causal))
    for grad, uid, like in zip(grads, (DQ, DK, DV), (dq, dk, dv), strict=True):
        grad.set_uid(uid).set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride()))
        grad.set_data_type(cg.io_type(q.dtype))
    return g


def _output_like(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    b, h, s, _ = q.shape
    return q.new_empty(b, s, h, v.shape[-1]).transpose(1, 2)


@torch.library.custom_op("trainperf::cudnn_sdpa", mutates_args=())
def cudnn_sdpa_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and the softmax's log-sum-exp per query row (float32)."""
    o = _output_like(q, v)
    stats = torch.empty(*q.shape[:3], 1, dtype=torch.float32, device=q.device)
    key = ("sdpa", cg.layout(q), cg.layout(k), cg.layout(v), causal, scale, q.device)
    graph = cg.cached_graph(key, lambda: _forward_graph(q, k, v, o, stats, causal, scale))
    cg.execute(graph, {Q: q, K: k, V: v, O: o, STATS: stats}, q.device)
    return o, stats


@cudnn_sdpa_op.register_fake
def fake_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward's outputs as its graphs lay them out (the float8 graphs' too), without running."""
    return _output_like(q, v), q.new_empty(*q.shape[:3], 1, dtype=torch.float32)


@torch.library.custom_op("trainperf::cudnn_sdpa_backward", mutates_args=())
def cudnn_sdpa_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           o: torch.Tensor, stats: torch.Tensor, causal: bool,
                           scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv from the forward's output and statistics."""
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    key = ("sdpa_bwd", *(cg.layout(t) for t in (do, q, k, v, o, stats, dq, dk, dv)), causal, scale, q.device)
    graph = cg.cached_graph(key, lambda: _backward_graph(do, q, k, v, o, stats, dq, dk, dv, causal, scale))
    cg.execute(graph, {DO: do, Q: q, K: k, V: v, O: o, STATS: stats, DQ: dq, DK: dk, DV: dv}, q.device)
    return dq, dk, dv


register_attention_autograd(cudnn_sdpa_op, cudnn_sdpa_backward_op)


def cudnn_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                    scale: float | None = None) -> torch.Tensor:
    """Attention of q [batch, heads, seq, dim] over k, v [batch, kv_heads, seq, dim] via cuDNN."""
    cg.require_cudnn(q.device, "cudnn-fe")
    if q.dtype not in (torch.bfloat16, torch.float16):
        from trainperf.core.errors import Unsupported
        raise Unsupported(f"cudnn-fe takes bf16 or fp16, not {q.dtype}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads {q.shape[1]} are not a multiple of K/V heads {k.shape[1]}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return cudnn_sdpa_op(q, k, v, causal, scale)[0]
