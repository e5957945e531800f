"""FlashAttention-2 tiled in plain PyTorch: online softmax forward, recomputing backward.

Not fast (every tile is a few PyTorch ops), but it shows the algorithm and its memory profile:
only O and the row log-sum-exp L are saved for backward, never the [seq, seq] probabilities.
Tiles run over the sequence; batch and heads are vectorised. Accumulation is in float32.
"""

from __future__ import annotations

import math

import torch

TILE = 128


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError("flash attention needs q, k, v of one shape [batch, heads, seq, head_dim]; "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")


def _causal_mask(i0: int, i1: int, j0: int, j1: int, device: torch.device) -> torch.Tensor:
    """True where query row (i0..i1) may not see key column (j0..j1)."""
    rows = torch.arange(i0, i1, device=device)[:, None]
    cols = torch.arange(j0, j1, device=device)[None, :]
    return cols > rows


class FlashAttentionTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, tile: int):  # noqa: ANN001, ANN205
        n = q.shape[-2]
        qf, kf, vf = q.float(), k.float(), v.float()
        out = torch.empty_like(qf)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        for i0 in range(0, n, tile):
            i1 = min(i0 + tile, n)
            qi = qf[..., i0:i1, :] * scale
            m = torch.full(qi.shape[:-1], float("-inf"), device=q.device)
            l = torch.zeros_like(m)  # noqa: E741 - the paper's name
            acc = torch.zeros_like(qi)
            for j0 in range(0, i1 if causal else n, tile):
                j1 = min(j0 + tile, n)
                s = qi @ kf[..., j0:j1, :].transpose(-1, -2)
                if causal and j1 > i0:
                    s = s.masked_fill(_causal_mask(i0, i1, j0, j1, q.device), float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                p = torch.exp(s - m_new[..., None])
                alpha = torch.exp(m - m_new)
                l = l * alpha + p.sum(-1)  # noqa: E741
                acc = acc * alpha[..., None] + p @ vf[..., j0:j1, :]
                m = m_new
            out[..., i0:i1, :] = acc / l[..., None]
            lse[..., i0:i1] = m + torch.log(l)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.tile = causal, scale, tile
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):  # noqa: ANN001, ANN205
        q, k, v, out, lse = ctx.saved_tensors
        causal, scale, tile, n = ctx.causal, ctx.scale, ctx.tile, q.shape[-2]
        qf, kf, vf, do = q.float(), k.float(), v.float(), dout.float()
        delta = (do * out).sum(-1)  # D = rowsum(dO ∘ O)
        dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
        for j0 in range(0, n, tile):
            j1 = min(j0 + tile, n)
            kj, vj = kf[..., j0:j1, :], vf[..., j0:j1, :]
            for i0 in range(j0 if causal else 0, n, tile):
                i1 = min(i0 + tile, n)
                s = (qf[..., i0:i1, :] @ kj.transpose(-1, -2)) * scale
                if causal and j1 > i0:
                    s = s.masked_fill(_causal_mask(i0, i1, j0, j1, q.device), float("-inf"))
                p = torch.exp(s - lse[..., i0:i1, None])
                dv[..., j0:j1, :] += p.transpose(-1, -2) @ do[..., i0:i1, :]
                dp = do[..., i0:i1, :] @ vj.transpose(-1, -2)
                ds = p * (dp - delta[..., i0:i1, None])
                dq[..., i0:i1, :] += (ds @ kj) * scale
                dk[..., j0:j1, :] += (ds.transpose(-1, -2) @ qf[..., i0:i1, :]) * scale
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def flash_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                          scale: float | None = None, tile: int = TILE) -> torch.Tensor:
    """FlashAttention-2 (PyTorch tiles) for [batch, heads, seq, head_dim] tensors."""
    _check(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return FlashAttentionTorch.apply(q, k, v, causal, scale, tile)
