"""Scale tensors in place by a scalar that lives on the device, with no pass over them when it is 1.

The chunked loss computes its gradients in the forward and scales them by the incoming gradient
in the backward. That gradient is 1 whenever the loss itself is what is differentiated (a
training step's `loss.backward()`), and then a pass would read and write the 600 MB of Llama 3's
head-weight and hidden-state gradients to multiply them by 1 (0.5 ms of a 24 × 768 step on an
H100). The scale is a GPU tensor: reading it on the host would stall the stream, and cannot
happen inside a CUDA graph. So every program of this kernel reads it and returns at once when it
is 1; the programs stride over the tensor, a few per SM, so that there are few programs to
return. Any other scale multiplies in float32 and rounds once to the tensor's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainperf.kernels import interpreting

BLOCK = 4096
PROGRAMS_PER_SM = 4


@triton.jit
def _scale_kernel(X, S, N, BLOCK: tl.constexpr):
    s = tl.load(S).to(tl.float32)
    if s != 1.0:
        step = tl.num_programs(0).to(tl.int64) * BLOCK
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, N, step):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(X + offs, mask=offs < N)
            tl.store(X + offs, (x.to(tl.float32) * s).to(X.dtype.element_ty), mask=offs < N)


def _programs(t: torch.Tensor) -> int:
    """Enough programs to fill the GPU; one for each block in the interpreter (the CPU)."""
    blocks = triton.cdiv(t.numel(), BLOCK)
    if interpreting():
        return blocks
    return min(blocks, PROGRAMS_PER_SM * torch.cuda.get_device_properties(t.device).multi_processor_count)


def scale_(tensors: list[torch.Tensor], scale: torch.Tensor) -> None:
    """Multiply each contiguous tensor of `tensors` in place by the one-element tensor `scale`
    (on the same device), skipping the work on the device when `scale` is 1. Each tensor's
    version counter moves, as with any in-place op, so autograd refuses a saved tensor that this
    changed (the kernel writes through a pointer, which autograd does not see)."""
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError(f"scale_ takes contiguous tensors, got strides {t.stride()}")
        if t.numel():
            _scale_kernel[(_programs(t),)](t, scale, t.numel(), BLOCK=BLOCK, num_warps=8)
        torch.autograd.graph.increment_version(t)
