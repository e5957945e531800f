"""Rotary position embedding in PyTorch: the reference of the RoPE kernel (kernels/rope.py) and the
LM's own RoPE (models/lm.py), in a module without Triton so that both import it."""

from __future__ import annotations

import torch


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE in PyTorch. x: [..., seq, head_dim]; cos, sin: [seq, head_dim / 2]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
