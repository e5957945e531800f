"""Fused kernels that can replace parts of the LM; each module has its PyTorch reference."""

import os

import torch

from trainperf.core.errors import Unsupported


def triton_runs(device: torch.device) -> bool:
    """Whether Triton kernels can run on `device`: a CUDA GPU, or the interpreter on the CPU."""
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def require_triton(device: torch.device, what: str) -> None:
    """Unsupported unless Triton can run here: a CUDA GPU, or the interpreter on the CPU."""
    if not triton_runs(device):
        raise Unsupported(f"{what} needs a CUDA GPU (or TRITON_INTERPRET=1 on the CPU)")
    try:
        import triton  # noqa: F401
    except ImportError:
        raise Unsupported(f"{what} needs Triton: pip install 'trainperf[triton]'") from None
