"""Fused kernels that can replace parts of the LM; each module has its PyTorch reference."""

import os

import torch

from trainperf.core.errors import Unsupported


def require_triton(device: torch.device, what: str) -> None:
    """Unsupported unless Triton can run here: a CUDA GPU, or the interpreter on the CPU."""
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise Unsupported(f"{what} needs a CUDA GPU (or TRITON_INTERPRET=1 on the CPU)")
    try:
        import triton  # noqa: F401
    except ImportError:
        raise Unsupported(f"{what} needs Triton: pip install 'trainperf[triton]'") from None
