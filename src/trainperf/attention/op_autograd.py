"""The autograd and fake backward shared by attention custom ops of one contract: a forward op
`(q, k, v, causal, scale) -> (o, stats)` and a backward op
`(do, q, k, v, o, stats, causal, scale) -> (dq, dk, dv)` (cuDNN's and FlashAttention 4's)."""

from __future__ import annotations

import torch


def register_attention_autograd(forward_op, backward_op) -> None:  # noqa: ANN001
    """Save q, k, v and both outputs; the statistics take no gradient; the backward gets a dO
    whose last dimension is contiguous."""
    @backward_op.register_fake
    def _(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
          stats: torch.Tensor, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup(ctx, inputs, output) -> None:  # noqa: ANN001
        q, k, v, ctx.causal, ctx.scale = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.mark_non_differentiable(output[1])

    def backward(ctx, do, _d_stats):  # noqa: ANN001, ANN202
        q, k, v, o, stats = ctx.saved_tensors
        do = do if do.stride(-1) == 1 else do.contiguous()
        return (*backward_op(do, q, k, v, o, stats, ctx.causal, ctx.scale), None, None)

    forward_op.register_autograd(backward, setup_context=setup)
