"""FlashAttention 4 (`fa4`): the CuTe-DSL kernels of the flash-attn-4 package (Hopper's warp-
specialised forward and backward on sm_90), as PyTorch custom ops with autograd and fake
implementations, so that it runs inside `torch.compile` graphs like trainperf's own kernels.

flash-attn-4 is an optional extra (`pip install 'trainperf[fa4]'`); without it, with an install
that does not import (`core/extras.py`), or on a GPU older than Hopper, every fa4 choice is an
`unsupported` row naming what it needs. Its kernels take
[batch, seq, heads, dim]: q, k, v arrive as [batch, heads, seq, dim] views of that layout (how
transformers and trainperf's LM make them), so the transposes cost no copy, and the output is
returned as the same kind of view. K/V may have fewer heads than Q (grouped-query attention runs
natively).
"""

from __future__ import annotations

import math

import torch

from trainperf.attention.op_autograd import register_attention_autograd
from trainperf.core.errors import Unsupported
from trainperf.core.extras import broken_install, import_problem

INSTALL_FA4 = "pip install 'trainperf[fa4]' (the flash-attn-4 package)"


# looked up once (torch.compile cannot trace an import): None, "not installed", or why the
# installed package does not import (no flash_attn, a FlashAttention 2 build, a part missing)
_PROBLEM = import_problem("flash_attn.cute.interface")
_INSTALLED = _PROBLEM is None


def _hopper_or_newer(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def fa4_runs(device: torch.device) -> bool:
    """Whether FlashAttention 4 trains on `device` (installed, and a Hopper or newer GPU)."""
    return _INSTALLED and _hopper_or_newer(device)


def require_fa4(device: torch.device, what: str = "fa4") -> None:
    """Unsupported (naming the install command, or the GPU it needs) unless FA4 trains here."""
    if not _INSTALLED:
        raise Unsupported(f"{what} needs FlashAttention 4{broken_install(_PROBLEM)}: {INSTALL_FA4}")
    if not _hopper_or_newer(device):
        raise Unsupported(f"{what} needs a Hopper or newer GPU (FlashAttention 4's backward runs on sm_90+)")


@torch.library.custom_op("trainperf::fa4_attention", mutates_args=())
def fa4_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                     scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Output [batch, seq, heads, dim] and the softmax's log-sum-exp [batch, heads, seq] (float32)
    of q, k, v laid out [batch, seq, heads, dim]."""
    from flash_attn.cute.interface import _flash_attn_fwd

    out, lse, *_ = _flash_attn_fwd(q, k, v, softmax_scale=scale, causal=causal, return_lse=True)
    return out, lse


@fa4_attention_op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
      scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    b, s, h, _ = q.shape
    return q.new_empty(b, s, h, v.shape[-1]), q.new_empty(b, h, s, dtype=torch.float32)


@torch.library.custom_op("trainperf::fa4_attention_backward", mutates_args=())
def fa4_attention_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              o: torch.Tensor, lse: torch.Tensor, causal: bool,
                              scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv from the forward's output and log-sum-exp."""
    from flash_attn.cute.interface import _flash_attn_bwd

    dq, dk, dv = _flash_attn_bwd(q, k, v, o, do, lse, scale, causal)[:3]
    return dq, dk, dv


register_attention_autograd(fa4_attention_op, fa4_attention_backward_op)


def check_fa4_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None) -> float:
    """Unsupported or ValueError unless FA4 takes q [batch, heads, seq, dim] and k, v [batch,
    kv_heads, seq, dim] here; the softmax scale (1/√dim unless given)."""
    require_fa4(q.device)
    if q.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"fa4 takes bf16 or fp16, not {q.dtype}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads {q.shape[1]} are not a multiple of K/V heads {k.shape[1]}")
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def fa4_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                  scale: float | None = None) -> torch.Tensor:
    """Attention of q [batch, heads, seq, dim] over k, v [batch, kv_heads, seq, dim] via FA4."""
    scale = check_fa4_inputs(q, k, v, scale)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    return fa4_attention_op(q, k, v, causal, scale)[0].transpose(1, 2)
