"""LM head + cross-entropy in row chunks, never materialising the [tokens, vocab] fp32 logits.

Forward computes, chunk by chunk, the logits, the loss and the gradients of the hidden states
and of the head weight (softmax − one-hot), so only one [chunk, vocab] block lives at a time;
backward just scales the stored gradients by the incoming gradient of the mean loss.
Where Triton runs, the softmax and its gradient are one kernel over the logits in their own
dtype (`cross_entropy.py`), every matrix product stays in that dtype, and the head-weight
gradient accumulates in place (`addmm_`: fp32 inside each product, one rounding per chunk), so no
float32 copy of the [vocab, d] gradient is made and added per chunk (measured ~8 ms of a 16k-token
step on an H100). Otherwise (the CPU) the block is taken to float32 and handled by PyTorch ops.
"""

from __future__ import annotations

import torch

from trainperf.kernels import triton_runs

CHUNK = 4096


def cross_entropy_grad_reference(logits: torch.Tensor, targets: torch.Tensor, scale: float
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss and (softmax − one-hot) · scale, computed in (at least) float32."""
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))
    lse = torch.logsumexp(x, dim=-1)
    loss = lse - x.gather(1, targets[:, None]).squeeze(1)
    grad = torch.softmax(x, dim=-1)
    grad[torch.arange(len(targets), device=grad.device), targets] -= 1.0
    return loss, grad * scale


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, fused):  # noqa: ANN001, ANN205
        n = hidden.shape[0]
        # the dtype of the logits' gradient: the inputs' own when fused, else fp32 (fp64 for fp64)
        acc = hidden.dtype if fused else torch.promote_types(hidden.dtype, torch.float32)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device)
        total = torch.zeros((), dtype=acc, device=hidden.device)
        w = weight.to(hidden.dtype)
        if fused:
            from trainperf.kernels.cross_entropy import cross_entropy_grad_
        for i in range(0, n, chunk):
            h, t = hidden[i:i + chunk], targets[i:i + chunk]
            logits = h @ w.t()
            if fused:  # the logits block becomes its own gradient, in place
                total += cross_entropy_grad_(logits, t, 1.0 / n).sum()
                g = logits
            else:
                loss, g = cross_entropy_grad_reference(logits, t, 1.0 / n)
                total += loss.sum()
            grad_hidden[i:i + chunk] = g.to(h.dtype) @ w
            grad_weight.addmm_(g.t(), h.to(acc))
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return total / n

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_out, grad_weight * grad_out, None, None, None


def chunked_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                    chunk: int = CHUNK, fused: bool | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy of `hidden @ weightᵀ` against `targets`, in chunks.
    `fused` picks the Triton softmax kernel (default: wherever Triton runs, below float64)."""
    d = hidden.shape[-1]
    if fused is None:
        fused = triton_runs(hidden.device) and hidden.dtype != torch.float64
    return ChunkedLinearCrossEntropy.apply(hidden.reshape(-1, d), weight, targets.reshape(-1), chunk, fused)
