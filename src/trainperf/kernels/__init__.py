"""Fused kernels that can replace parts of the LM; each module has its PyTorch reference."""

import os

import torch

from trainperf.core.errors import Unsupported


def interpreting() -> bool:
    """Whether Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1, on the CPU)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def tune_candidates(candidates: list, interpreter_choice: object) -> list:
    """A kernel's autotuning candidates: all of them; the one small choice the interpreter gets;
    or, with TRAINPERF_TRITON_TUNE=0, only the first (quick compiles for correctness tests)."""
    if interpreting():
        return [interpreter_choice]
    return candidates[:1] if os.environ.get("TRAINPERF_TRITON_TUNE") == "0" else candidates


def triton_runs(device: torch.device) -> bool:
    """Whether Triton kernels can run on `device`: a CUDA GPU, or the interpreter on the CPU."""
    return device.type == "cuda" or interpreting()


def require_triton(device: torch.device, what: str) -> None:
    """Unsupported unless Triton can run here: a CUDA GPU, or the interpreter on the CPU."""
    if not triton_runs(device):
        raise Unsupported(f"{what} needs a CUDA GPU (or TRITON_INTERPRET=1 on the CPU)")
    try:
        import triton  # noqa: F401
    except ImportError:
        raise Unsupported(f"{what} needs Triton: pip install 'trainperf[triton]'") from None
