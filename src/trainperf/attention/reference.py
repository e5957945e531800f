"""Naive attention: QKᵀ → mask → softmax → ·V, materialising the full score matrix.

Runs in any dtype, float64 included, so it is the reference every other implementation is
checked against.
"""

from __future__ import annotations

import math

import torch


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                    scale: float | None = None) -> torch.Tensor:
    """softmax(q·kᵀ·scale + causal mask)·v for [batch, heads, seq, head_dim] tensors."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:  # top-left aligned, like SDPA's is_causal: query i sees keys 0..i
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)
