"""The chunked LM-head loss (kernels/chunked_loss.py) with the head's three products on float8 GEMMs:
`--float8 trainperf-head`, trainperf's float8 on every Linear of the model, the LM head too.

The casts and scales are those of trainperf's other float8 products (delayed scaling,
kernels/float8_mlp.py): the hidden states and the head weight e4m3, the logits' gradient e5m2,
each cast once with its transpose beside it. Fast accumulation nowhere: the logits' product sums
over the model width, the input gradient's over the whole vocabulary.

  before the chunks  h → h8, h8ᵀ;  W → W8, W8ᵀ
  each chunk         logits = h8·W8ᵀ (bf16);  g = (softmax − one-hot)/n in place;
                     g → g8, and its columns of g8ᵀ [vocab, tokens];  dh = g8·W8
  after the chunks   dW = g8ᵀ·h8, one product over every token

So the head weight's gradient is one float8 product, with no accumulation across chunks, at the
cost of one byte a logit held until it (2.1 GB at Llama 3's vocabulary and 16,384 tokens) beside
the chunk's bf16 block. Every chunk's gradient is cast at one scale, the amax of all of them
recorded for the next iterations.
"""

from __future__ import annotations

import torch

from trainperf.core.errors import Unsupported
from trainperf.kernels.chunked_loss import chunk_rows, scaled_grads
from trainperf.kernels.float8_linear import GRAD, IN, WEIGHT, linear_state
from trainperf.kernels.float8_mlp import (
    E4M3,
    E5M2,
    STATE,
    ScaleState,
    check_dims,
    check_tokens,
    float8_product,
    scale_and_cast,
)


def head_state(weight: torch.Tensor) -> ScaleState:
    """The scale state of an LM head of `weight` on float8 GEMMs (a float8 Linear's: input,
    weight, gradient); Unsupported where they cannot take its vocabulary."""
    if weight.shape[0] % 16:
        raise Unsupported("--float8 trainperf-head runs the LM head on float8 GEMMs, which take a vocabulary "
                          f"of a multiple of 16, not {weight.shape[0]}")
    return linear_state(weight)


@torch.library.custom_op("trainperf::float8_chunked_lm_loss", mutates_args=STATE)
def _loss_op(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,
             hist: torch.Tensor, now: torch.Tensor, scale: torch.Tensor, inv: torch.Tensor,
             calibrated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mean loss, and the gradients of the hidden states and of the head weight."""
    from trainperf.kernels.cross_entropy import cross_entropy_grad_

    state = (hist, now, scale, inv, calibrated)
    n = hidden.shape[0]
    h8, h8t = scale_and_cast(hidden, state, IN, E4M3)
    w8, w8t = scale_and_cast(weight, state, WEIGHT, E4M3)
    g8t = torch.empty(weight.shape[0], n, dtype=E5M2, device=hidden.device)
    grad_hidden = torch.empty_like(hidden, memory_format=torch.contiguous_format)
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for i in range(0, n, chunk):
        rows = slice(i, i + chunk)
        logits = float8_product(h8[rows], w8, inv, IN, WEIGHT, out_dtype=hidden.dtype)
        total += cross_entropy_grad_(logits, targets[rows], 1.0 / n).sum()
        g8, _ = scale_and_cast(logits, state, GRAD, E5M2, yt=g8t[:, rows], rescale=i == 0)
        del logits  # the chunk's bf16 block dies before the next chunk makes its own
        grad_hidden[rows] = float8_product(g8, w8t, inv, GRAD, WEIGHT, out_dtype=hidden.dtype)
    grad_weight = float8_product(g8t, h8t, inv, GRAD, IN, out_dtype=weight.dtype)
    return total / n, grad_hidden, grad_weight


@_loss_op.register_fake
def _(hidden, weight, targets, chunk, hist, now, scale, inv, calibrated):  # noqa: ANN001, ANN202
    return (hidden.new_empty((), dtype=torch.float32),
            torch.empty_like(hidden, memory_format=torch.contiguous_format), torch.empty_like(weight))


class _Float8HeadLoss(torch.autograd.Function):
    """The op's autograd (an op that updates its scale state takes none of its own)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, state):  # noqa: ANN001, ANN205
        loss, grad_hidden, grad_weight = _loss_op(hidden, weight, targets, chunk, *state.tensors())
        ctx.save_for_backward(grad_hidden, grad_weight)
        return loss

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        return *scaled_grads(*ctx.saved_tensors, grad_out, fused=True), None, None, None


def float8_chunked_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                           state: ScaleState, chunk: int | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy of `hidden @ weightᵀ` against `targets`, the head's products
    on float8 GEMMs scaled from `state` (head_state), in chunks of `chunk` rows (default:
    chunk_rows of the bf16 logits)."""
    d = hidden.shape[-1]
    check_tokens(hidden)
    check_dims(d, weight.shape[0])
    if chunk is None:
        chunk = chunk_rows(weight.shape[0], hidden.dtype)
    if chunk % 16:
        raise ValueError(f"float8 GEMMs take chunks of a multiple of 16 rows, not {chunk}")
    return _Float8HeadLoss.apply(hidden.reshape(-1, d).contiguous(), weight, targets.reshape(-1), chunk,
                                 state)
