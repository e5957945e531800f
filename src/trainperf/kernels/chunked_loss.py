"""LM head + cross-entropy in row chunks, never materialising the [tokens, vocab] fp32 logits.

Forward computes, chunk by chunk, the logits, the loss and the gradients of the hidden states
and of the head weight (softmax − one-hot), so only one [chunk, vocab] block lives at a time:
each chunk's block is freed before the next one is made. Backward scales the stored gradients by
the incoming gradient of the mean loss in place (no second [vocab, d] copy; a second backward
through the same forward fails on the saved tensors' version check instead of scaling twice).
The loss's share of the step's memory peak, which comes while every activation is held, is that
one logits block: at most LOGITS_BLOCK_BYTES (8,192 rows of Llama 3's 128k vocabulary in bf16).
Smaller blocks cost a read-modify-write of the head-weight gradient each (docs/peers.md).
Where Triton runs, the softmax and its gradient are one kernel over the logits in their own
dtype (`cross_entropy.py`), every matrix product stays in that dtype, the head-weight gradient
accumulates in place (`addmm_`: fp32 inside each product, one rounding per chunk), so no float32
copy of the [vocab, d] gradient is made and added per chunk (measured ~8 ms of a 16k-token step
on an H100), and the backward's scaling skips its pass on the device when the incoming gradient
is 1 (`grad_scale.py`). Otherwise (the CPU) the block is taken to float32 and handled by PyTorch
ops.
"""

from __future__ import annotations

import torch

from trainperf.kernels import triton_runs
from trainperf.kernels.quack_gemm import mm_into

LOGITS_BLOCK_BYTES = 2 * 2**30
MAX_CHUNK = 8192


def chunk_rows(vocab: int, dtype: torch.dtype) -> int:
    """Rows per chunk: the largest power of two whose [rows, vocab] logits fit LOGITS_BLOCK_BYTES
    (at least 128, at most MAX_CHUNK)."""
    rows = LOGITS_BLOCK_BYTES // (vocab * dtype.itemsize)
    return max(128, min(MAX_CHUNK, 1 << max(rows.bit_length() - 1, 0)))


def cross_entropy_grad_reference(logits: torch.Tensor, targets: torch.Tensor, scale: float
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss and (softmax − one-hot) · scale, computed in (at least) float32."""
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))
    lse = torch.logsumexp(x, dim=-1)
    loss = lse - x.gather(1, targets[:, None]).squeeze(1)
    grad = torch.softmax(x, dim=-1)
    grad[torch.arange(len(targets), device=grad.device), targets] -= 1.0
    return loss, grad * scale


def _acc_dtype(hidden: torch.Tensor, fused: bool) -> torch.dtype:
    """The dtype of the logits' gradient: the inputs' own when fused, else fp32 (fp64 for fp64)."""
    return hidden.dtype if fused else _loss_dtype(hidden)


def _loss_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The loss sums in fp32 at least: a bf16 sum of 16k per-row losses near 12 is off by ~0.3%."""
    return torch.promote_types(hidden.dtype, torch.float32)


# The whole chunked forward is one PyTorch custom op (autograd and a fake implementation
# registered), so torch.compile and CUDA graphs take it whole, its Triton kernel included.
@torch.library.custom_op("trainperf::chunked_lm_loss", mutates_args=())
def chunked_loss_op(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,
                    fused: bool, tuned: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mean loss, and the gradients of the hidden states and of the head weight."""
    return loss_and_grads(hidden, weight, targets, chunk, fused, tuned)


def loss_and_grads(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,
                   fused: bool, tuned: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """chunked_loss_op's computation, chunk by chunk (a plain function: what runs inside the op)."""
    n = hidden.shape[0]
    acc = _acc_dtype(hidden, fused)
    grad_hidden = torch.empty_like(hidden, memory_format=torch.contiguous_format)  # as the fake says
    grad_weight = torch.empty(weight.shape, dtype=acc, device=weight.device)
    total = torch.zeros((), dtype=_loss_dtype(hidden), device=hidden.device)
    w = weight.to(hidden.dtype)
    for i in range(0, n, chunk):
        rows = slice(i, i + chunk)
        total += _chunk(hidden[rows], w, targets[rows], 1.0 / n, fused, tuned, grad_hidden[rows],
                        grad_weight, first=i == 0)
    return total / n, grad_hidden, grad_weight.to(weight.dtype)


def _chunk(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, scale: float, fused: bool, tuned: bool,
           grad_h: torch.Tensor, grad_weight: torch.Tensor, first: bool) -> torch.Tensor:
    """One chunk: its summed loss; its rows of the hidden states' gradient written into `grad_h`,
    its share of the head weight's added to `grad_weight` (written by the `first` chunk: no zeroed
    [vocab, d] to read). Its logits block dies on return, before the next chunk makes its own.
    With `tuned`, each product runs on quack's GEMM where a tuned configuration is known."""
    logits = h.new_empty(h.shape[0], w.shape[0])
    mm_into(h, w.t(), logits, tuned=tuned)
    if fused:  # the logits block becomes its own gradient, in place
        from trainperf.kernels.cross_entropy import cross_entropy_grad_

        loss, g = cross_entropy_grad_(logits, t, scale), logits
    else:
        loss, g = cross_entropy_grad_reference(logits, t, scale)
    mm_into(g.to(h.dtype), w, grad_h, tuned=tuned)
    mm_into(g.t(), h.to(grad_weight.dtype), grad_weight, accumulate=not first, tuned=tuned)
    return loss.sum()


@chunked_loss_op.register_fake
def _(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,
      fused: bool, tuned: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (hidden.new_empty((), dtype=_loss_dtype(hidden)),
            torch.empty_like(hidden, memory_format=torch.contiguous_format), torch.empty_like(weight))


def scaled_grads(grad_hidden: torch.Tensor, grad_weight: torch.Tensor, grad_out: torch.Tensor,
                 fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients a head loss stored in its forward, scaled by the loss's incoming gradient:
    in place, where `fused` on Triton's kernel."""
    if _traced(grad_hidden):  # a traced backward takes no mutation of what it saved
        return grad_hidden * grad_out, grad_weight * grad_out
    if fused:  # no pass at all where grad_out is 1, the gradient of a loss that is the objective
        from trainperf.kernels.grad_scale import scale_

        scale_([grad_hidden, grad_weight], grad_out)
    else:  # one vectorised pass over both, the scale in their dtype (PyTorch's generic per-tensor
        # kernel otherwise: 1.3 ms for Llama 3's head gradient on an H100)
        torch._foreach_mul_([grad_hidden, grad_weight], grad_out.to(grad_hidden.dtype))
    return grad_hidden, grad_weight


def _setup(ctx, inputs, output) -> None:  # noqa: ANN001
    ctx.save_for_backward(output[1], output[2])
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.fused = inputs[4]


def _backward(ctx, grad_out, _g_hidden, _g_weight):  # noqa: ANN001, ANN202
    return *scaled_grads(*ctx.saved_tensors, grad_out, ctx.fused), None, None, None, None


def _traced(t: torch.Tensor) -> bool:
    """Whether this runs under a tracer (Dynamo, AOTAutograd, make_fx, fake tensors), not eagerly."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return (torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None
            or type(t) is not torch.Tensor)


chunked_loss_op.register_autograd(_backward, setup_context=_setup)


def chunked_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                    chunk: int | None = None, fused: bool | None = None, tuned: bool = False) -> torch.Tensor:
    """Mean next-token cross-entropy of `hidden @ weightᵀ` against `targets`, in chunks of `chunk`
    rows (default: chunk_rows). `fused` picks the Triton softmax kernel (default: wherever Triton
    runs, below float64); `tuned` quack's GEMM for the products where a configuration tuned for
    the GPU is known (kernels/quack_gemm.py)."""
    d = hidden.shape[-1]
    if chunk is None:
        chunk = chunk_rows(weight.shape[0], hidden.dtype)
    if fused is None:
        fused = triton_runs(hidden.device) and hidden.dtype != torch.float64
    return chunked_loss_op(hidden.reshape(-1, d), weight, targets.reshape(-1), chunk, fused, tuned)[0]
