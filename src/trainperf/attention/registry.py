"""Attention implementations by name; all share one signature (q, k, v, causal, scale).

q, k, v are [batch, heads, seq, head_dim]. Adding an implementation is one function plus one
line in `_FACTORIES`. A name that cannot run on the given device raises `Unsupported`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch
import torch.nn.functional as F

from trainperf.attention.reference import naive_attention
from trainperf.core.errors import Unsupported

AttentionFn = Callable[..., torch.Tensor]

SDPA_BACKENDS = {
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-math": "MATH",
}


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
         scale: float | None = None) -> torch.Tensor:
    """PyTorch SDPA with whichever backend PyTorch picks."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def sdpa_pinned(backend_name: str) -> AttentionFn:
    """SDPA restricted to one backend: it runs that kernel or raises, never falls back."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                  scale: float | None = None) -> torch.Tensor:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    attention.__name__ = f"sdpa_{backend_name.lower()}"
    return attention


@cache
def _compiled_naive() -> AttentionFn:
    from trainperf.workloads.precision import allow_recompiles

    allow_recompiles()  # every new shape compiles anew (dynamic=False)
    return torch.compile(naive_attention, dynamic=False)


def _torch_fa2() -> AttentionFn:
    from trainperf.attention.flash_torch import flash_attention_torch
    return flash_attention_torch


def _triton_fa2(atomic_dq: bool = False) -> AttentionFn:
    from functools import partial

    from trainperf.attention.flash_triton import flash_attention_triton
    return partial(flash_attention_triton, atomic_dq=True) if atomic_dq else flash_attention_triton


def _cudnn_fe() -> AttentionFn:
    from trainperf.attention.cudnn_fe import cudnn_attention
    return cudnn_attention


def _cudnn_fp8() -> AttentionFn:
    from trainperf.attention.cudnn_fp8 import cudnn_fp8_attention
    return cudnn_fp8_attention


def _fa4() -> AttentionFn:
    from trainperf.attention.fa4 import fa4_attention
    return fa4_attention


_FACTORIES: dict[str, Callable[[], AttentionFn]] = {
    "naive": lambda: naive_attention,
    "naive-compiled": _compiled_naive,
    "sdpa": lambda: sdpa,
    **{name: (lambda b=b: sdpa_pinned(b)) for name, b in SDPA_BACKENDS.items()},
    "torch-fa2": _torch_fa2,
    "triton-fa2": _triton_fa2,
    "triton-fa2-atomic": lambda: _triton_fa2(atomic_dq=True),
    "cudnn-fe": _cudnn_fe,
    "cudnn-fp8": _cudnn_fp8,
    "fa4": _fa4,
}

NAMES = tuple(_FACTORIES)
GPU_ONLY = {"sdpa-flash", "sdpa-efficient", "sdpa-cudnn"}


def get_attention(name: str, device: torch.device | None = None) -> AttentionFn:
    """The implementation called `name` for `device`; ValueError for an unknown name."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown attention {name!r}; valid choices: {', '.join(NAMES)}")
    if device is not None and device.type != "cuda" and name in GPU_ONLY:
        raise Unsupported(f"{name} needs a CUDA GPU")
    if name == "cudnn-fe" and device is not None:
        from trainperf.kernels.cudnn_graphs import require_cudnn
        require_cudnn(device, name)
    if name == "cudnn-fp8" and device is not None:
        from trainperf.attention.cudnn_fp8 import require_float8_attention
        require_float8_attention(device, name)
    if name == "fa4" and device is not None:
        from trainperf.attention.fa4 import require_fa4
        require_fa4(device, name)
    if name.startswith("triton-") and device is not None:
        from trainperf.kernels import require_triton
        require_triton(device, name)
    return _FACTORIES[name]()
