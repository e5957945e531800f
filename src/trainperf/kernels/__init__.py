"""Fused kernels that can replace parts of the LM; each module has its PyTorch reference."""

import functools
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


INSTALL_TRITON = "pip install 'trainperf[triton]'"


@functools.cache
def triton_installed() -> bool:
    """Whether `import triton` works. Triton is an optional extra: CPU-only installs lack it."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def triton_runs(device: torch.device) -> bool:
    """Whether Triton kernels can run on `device`: Triton is installed, and the device is a CUDA
    GPU or the CPU under Triton's interpreter."""
    return triton_installed() and (device.type == "cuda" or interpreting())


def stores_right(x: torch.Tensor) -> bool:
    """Whether a Triton kernel writes x's dtype right where x is: on the GPU always, in Triton's
    interpreter (on the CPU) all but bf16, whose stores it rounds wrong."""
    return x.is_cuda or x.dtype != torch.bfloat16


def require_triton(device: torch.device, what: str) -> None:
    """Unsupported (naming the install command or the device it needs) unless Triton runs here.
    Call it before importing a Triton kernel module: those import Triton at the top."""
    if not triton_installed():
        raise Unsupported(f"{what} needs Triton: {INSTALL_TRITON}")
    if not triton_runs(device):
        raise Unsupported(f"{what} needs a CUDA GPU (or TRITON_INTERPRET=1 on the CPU)")


def require_float8_gemms(device: torch.device, what: str) -> None:
    """Unsupported unless trainperf's float8 kernels run here: Triton (require_triton) and, on a
    GPU, float8 tensor cores (sm_89 or newer)."""
    require_triton(device, what)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        raise Unsupported(f"{what} needs a GPU with float8 tensor cores (sm_89 or newer)")
