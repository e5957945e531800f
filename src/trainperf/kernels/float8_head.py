"""The chunked LM-head loss (kernels/chunked_loss.py) with the head's three products on float8 GEMMs:
`--float8 trainperf-head`, trainperf's float8 on every Linear of the model, the LM head too.

The casts and scales are those of trainperf's other float8 products (delayed scaling,
kernels/float8_mlp.py): the hidden states and the head weight e4m3, the logits' gradient e5m2,
each cast once with its transpose beside it. Fast accumulation nowhere: the logits' product sums
over the model width, the input gradient's over the whole vocabulary.

  before the chunks  h → h8, h8ᵀ;  W → W8, W8ᵀ
  each chunk         logits = h8·W8ᵀ (bf16);  each row's loss and logsumexp;
                     g = (softmax − one-hot)/n → g8, and its columns of g8ᵀ [vocab, tokens];
                     dh = g8·W8
  after the chunks   dW = g8ᵀ·h8, one product over every token

So the head weight's gradient is one float8 product, with no accumulation across chunks, at the
cost of one byte a logit held until it (2.1 GB at Llama 3's vocabulary and 16,384 tokens) beside
the chunk's bf16 block. The logits' gradient never exists in bf16: the kernel that casts it
makes it from the logits and their rows' logsumexp, so each logit is read twice from memory
(the transposed tile's second read comes from L2) and written as two float8 bytes, where an
in-place bf16 gradient cast afterwards costs two more bytes read and two written. Every chunk's
gradient is cast at one scale, the amax of all of them recorded for the next iterations; the
calibrating iteration first takes the amax of the first chunk's gradient in a pass of its own.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainperf.core.errors import Unsupported
from trainperf.kernels.chunked_loss import chunk_rows, scaled_grads
from trainperf.kernels.cross_entropy import cross_entropy_lse2, softmax_minus_onehot
from trainperf.kernels.float8_linear import GRAD, IN, WEIGHT, linear_state
from trainperf.kernels.float8_mlp import (
    E4M3,
    E5M2,
    STATE,
    WARPS,
    ScaleState,
    atomic_amax,
    check_dims,
    check_tokens,
    float8_max,
    float8_product,
    next_scale,
    scale_and_cast,
    store_float8,
    tile_of,
    transpose_back,
)

# (rows, columns) of a gradient-cast tile, at the casts' WARPS: for 12,288 rows of Llama 3's
# vocabulary on an H200, 2.62 ms against 2.92 at 64 x 64 and 3.90 for the bf16 gradient in place
# and cast after (benchmarks/probes/float8_logits_grad.py)
GRAD_TILE = (64, 128)


def head_state(weight: torch.Tensor) -> ScaleState:
    """The scale state of an LM head of `weight` on float8 GEMMs (a float8 Linear's: input,
    weight, gradient); Unsupported where they cannot take its vocabulary."""
    if weight.shape[0] % 16:
        raise Unsupported("--float8 trainperf-head runs the LM head on float8 GEMMs, which take a vocabulary "
                          f"of a multiple of 16, not {weight.shape[0]}")
    return linear_state(weight)


@triton.jit
def _logits_grad(X, LSE, T, r, c, mask, M, V, scale_n):
    """(softmax − one-hot)·scale_n of the tile of X [M, V] at rows r and columns c."""
    x = tl.load(X + r * V + c, mask=mask, other=0.0).to(tl.float32)
    lse2 = tl.load(LSE + r, mask=r < M, other=0.0)
    target = tl.load(T + r, mask=r < M, other=-1)
    return softmax_minus_onehot(x, lse2, c, target) * scale_n


@triton.jit
def _grad_cast_kernel(X, LSE, T, Y, YT, SCALE, AMAX, M, V, LDT, scale_n, FMAX: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, CAST: tl.constexpr):
    """The logits' gradient from X [M, V] and its rows' lse2, its amax into AMAX and, when CAST,
    cast into Y [M, V] and YT (its transpose, rows LDT elements apart: columns of a wider tensor)."""
    r, c, mask = tile_of(M, V, BM, BN, False)
    g = _logits_grad(X, LSE, T, r, c, mask, M, V, scale_n)
    atomic_amax(AMAX, g, mask)
    if CAST:
        scale = tl.load(SCALE)
        store_float8(g, Y, r * V + c, mask, scale, FMAX)
        transpose_back(Y, YT, M, V, V, LDT, BM, BN)


def _cast_logits_grad(logits: torch.Tensor, targets: torch.Tensor, scale_n: float,
                      state: tuple[torch.Tensor, ...], g8t: torch.Tensor, first: bool
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's per-row loss, and its logits' gradient (softmax − one-hot)·scale_n as e5m2 at
    the gradient's scale, its transpose into `g8t` (the chunk's columns). The `first` chunk takes
    the iteration's scale; the others join its amax."""
    loss, lse2 = cross_entropy_lse2(logits, targets)
    m, v = logits.shape
    g8 = torch.empty(m, v, dtype=E5M2, device=logits.device)

    def launch(amax: torch.Tensor, cast: bool) -> None:
        grid = (triton.cdiv(m, GRAD_TILE[0]), triton.cdiv(v, GRAD_TILE[1]))
        _grad_cast_kernel[grid](logits, lse2, targets, g8, g8t, state[2][GRAD:], amax, m, v, g8t.stride(0),
                                scale_n, FMAX=float8_max(E5M2), BM=GRAD_TILE[0], BN=GRAD_TILE[1], CAST=cast,
                                num_warps=WARPS)

    def amax() -> torch.Tensor:  # what calibrates: the first chunk's gradient, before any cast
        out = torch.zeros((), dtype=torch.float32, device=logits.device)
        launch(out, cast=False)
        return out

    if first:
        next_scale(*state, GRAD, E5M2, amax)
    launch(state[1][GRAD:], cast=True)
    return loss, g8


@torch.library.custom_op("trainperf::float8_chunked_lm_loss", mutates_args=STATE)
def _loss_op(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,
             hist: torch.Tensor, now: torch.Tensor, scale: torch.Tensor, inv: torch.Tensor,
             calibrated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mean loss, and the gradients of the hidden states and of the head weight."""
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
        loss, g8 = _cast_logits_grad(logits, targets[rows], 1.0 / n, state, g8t[:, rows], first=i == 0)
        total += loss.sum()
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
