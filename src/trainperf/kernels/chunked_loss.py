"""LM head + cross-entropy in row chunks, never materialising the [tokens, vocab] fp32 logits.

Forward computes, chunk by chunk, the logits, the loss and the gradients of the hidden states
and of the head weight (softmax − one-hot), so only one [chunk, vocab] block lives at a time;
backward just scales the stored gradients by the incoming gradient of the mean loss.
"""

from __future__ import annotations

import torch

CHUNK = 4096


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk):  # noqa: ANN001, ANN205
        n = hidden.shape[0]
        acc = torch.promote_types(hidden.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device)
        total = torch.zeros((), dtype=acc, device=hidden.device)
        w = weight.to(hidden.dtype)
        for i in range(0, n, chunk):
            h = hidden[i:i + chunk]
            logits = (h @ w.t()).to(acc)
            t = targets[i:i + chunk]
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, t[:, None]).squeeze(1)).sum()
            g = torch.softmax(logits, dim=-1)
            g[torch.arange(len(t), device=g.device), t] -= 1.0
            g /= n
            grad_hidden[i:i + chunk] = (g.to(h.dtype) @ w).to(hidden.dtype)
            grad_weight += g.t() @ h.to(acc)
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return total / n

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_out, grad_weight * grad_out, None, None


def chunked_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                    chunk: int = CHUNK) -> torch.Tensor:
    """Mean next-token cross-entropy of `hidden @ weightᵀ` against `targets`, in chunks."""
    d = hidden.shape[-1]
    return ChunkedLinearCrossEntropy.apply(hidden.reshape(-1, d), weight, targets.reshape(-1), chunk)
