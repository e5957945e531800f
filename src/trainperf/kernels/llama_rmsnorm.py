"""LlamaRMSNorm's values and gradients in PyTorch, for kernels that compute the norm inside another
(kernels/float8_norm.py) and the backward that follows them."""

from __future__ import annotations

import torch


def rms_norm_reference(s: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm of s, rounded where it rounds."""
    s32 = s.float()
    normed = (s32 * torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + eps)).to(s.dtype)
    return weight * normed


def rms_norm_backward(s: torch.Tensor, weight: torch.Tensor, eps: float,
                      grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of s and of the weight, from the gradient of rms_norm_reference(s, weight, eps)."""
    s32, g = s.float(), grad.float()
    rstd = torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + eps)
    unit = s32 * rstd
    grad_weight = (g * unit.to(s.dtype).float()).sum(0)
    gw = g * weight.float()
    grad_s = rstd * (gw - unit * (gw * unit).mean(-1, keepdim=True))
    return grad_s.to(s.dtype), grad_weight.to(weight.dtype)
