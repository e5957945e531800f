"""RMSNorm implementations by name, so a model can swap its normalisation layer."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """Plain PyTorch RMSNorm (several element-wise kernels), computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


class FusedRMSNorm(RMSNorm):
    """PyTorch's own `F.rms_norm` (a fused kernel where PyTorch has one)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)


class TritonRMSNorm(RMSNorm):
    """trainperf's Triton RMSNorm: one kernel forward, one backward, saves only 1/rms."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from trainperf.kernels import require_triton

        require_triton(x.device, "--norm triton")
        from trainperf.kernels.rmsnorm import rmsnorm_triton

        return rmsnorm_triton(x, self.weight, self.eps)


class CudnnRMSNorm(RMSNorm):
    """RMSNorm as cuDNN-frontend graphs (one kernel forward, one backward), the study's swap."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from trainperf.kernels.cudnn_graphs import require_cudnn

        require_cudnn(x.device, "--norm cudnn")
        from trainperf.kernels.cudnn_rmsnorm import rmsnorm_cudnn

        return rmsnorm_cudnn(x, self.weight, self.eps)


NORMS: dict[str, Callable[[int], nn.Module]] = {"torch": RMSNorm, "fused": FusedRMSNorm,
                                                "triton": TritonRMSNorm, "cudnn": CudnnRMSNorm}


def make_norm(name: str, dim: int) -> nn.Module:
    """A norm layer called `name`; ValueError naming the choices otherwise."""
    if name not in NORMS:
        raise ValueError(f"unknown norm {name!r}; valid choices: {', '.join(NORMS)}")
    return NORMS[name](dim)
