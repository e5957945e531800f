"""Cross-entropy loss and its logits gradient in one Triton kernel, written over the logits.

Per row (one program each): an online max / sum-exp pass gives lse, the loss is lse − x[target],
and a second pass overwrites the logits with (softmax − one-hot) · scale in their own dtype. So
bf16 logits are read twice and written once, with no float32 copy: the chunked LM loss uses this
to cut the memory traffic of the [tokens, vocab] block, the largest elementwise work of a step.
The block width and warps are autotuned per vocabulary: wide programs keep few rows in flight,
so a row's second read can come from L2 instead of HBM.

The online pass keeps one running max per GROUP neighbouring elements (held by one thread), so
its sums are rescaled once per group, not once per element: 1 + 1/GROUP exponentials per element
instead of 2. On an H100 that took 1.88 against 2.00 ms for 8,192 rows of Llama 3's vocabulary; a
single max over the whole block, which needs a block-wide reduction per step, took 2.11 ms
(benchmarks/probes/ce_exp_count.py).

`cross_entropy_lse2` runs the first pass alone, keeping each row's logsumexp and the logits as
they are: the float8 LM head (float8_head.py) makes the gradient in the kernel that casts it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainperf.kernels import tune_candidates
from trainperf.kernels.tuning import bench, tuned_launch

# (BLOCK, warps) candidates; the interpreter gets one narrow block (several per row in the tests).
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in tune_candidates(
    [(2048, 8), (4096, 8), (4096, 16), (8192, 16), (8192, 32), (16384, 32)], (512, 4))]


GROUP = 16  # elements per running max; 16 and 32 were equally fast, 8 as slow as one per element
LOG2E = tl.constexpr(1.4426950408889634)  # a constexpr: what a jitted function may read


@triton.jit
def _row_lse2(row_ptr, offs, V, BLOCK: tl.constexpr, GROUP: tl.constexpr):
    """log2 of the sum of 2^(x·log2 e) over a row: its logsumexp in log2 units."""
    m = tl.full([BLOCK // GROUP], float("-inf"), dtype=tl.float32)  # in log2 units, as exp2 takes them
    s = tl.zeros([BLOCK // GROUP], dtype=tl.float32)
    for start in range(0, V, BLOCK):  # online max and sum of exp, per group
        cols = start + offs
        x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * LOG2E
        m_new = tl.maximum(m, tl.max(x, 1))
        s = tl.where(m_new > float("-inf"),
                     s * tl.exp2(m - m_new) + tl.sum(tl.exp2(x - m_new[:, None]), 1), 0.0)
        m = m_new
    m_row = tl.max(m, 0)
    return m_row + tl.log2(tl.sum(s * tl.exp2(m - m_row), 0))


@triton.jit
def _row_loss(X, T, LOSS, stride, V, BLOCK: tl.constexpr, GROUP: tl.constexpr):
    """Store this program's row's loss (lse − x[target]); its pointer, block offsets ([BLOCK //
    GROUP, GROUP]: the max over a group stays in one thread), target and lse in log2 units."""
    row_ptr = X + tl.program_id(0).to(tl.int64) * stride
    target = tl.load(T + tl.program_id(0))
    offs = tl.arange(0, BLOCK // GROUP)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    lse2 = _row_lse2(row_ptr, offs, V, BLOCK, GROUP)
    tl.store(LOSS + tl.program_id(0), lse2 / LOG2E - tl.load(row_ptr + target).to(tl.float32))
    return row_ptr, offs, target, lse2


@triton.jit
def softmax_minus_onehot(x, lse2, cols, target):
    """softmax − one-hot of logits `x` (float32) at columns `cols`, from their row's lse2."""
    return tl.exp2(x * LOG2E - lse2) - tl.where(cols == target, 1.0, 0.0)


# The kernel overwrites X, so the autotuner puts the logits back after each trial (it holds a
# copy of the block while it tunes, once per vocabulary size).
@triton.autotune(configs=CONFIGS, key=["V", "GROUP"], restore_value=["X"], do_bench=bench)
@triton.jit
def _ce_kernel(X, T, LOSS, stride, V, scale, BLOCK: tl.constexpr, GROUP: tl.constexpr):
    row_ptr, offs, target, lse2 = _row_loss(X, T, LOSS, stride, V, BLOCK, GROUP)
    for start in range(0, V, BLOCK):
        cols = start + offs
        x = tl.load(row_ptr + cols, mask=cols < V, other=0.0).to(tl.float32)
        g = softmax_minus_onehot(x, lse2, cols, target)
        tl.store(row_ptr + cols, (g * scale).to(X.dtype.element_ty), mask=cols < V)


@triton.autotune(configs=CONFIGS, key=["V", "GROUP"], do_bench=bench)
@triton.jit
def _loss_lse_kernel(X, T, LOSS, LSE, stride, V, BLOCK: tl.constexpr, GROUP: tl.constexpr):
    _, _, _, lse2 = _row_loss(X, T, LOSS, stride, V, BLOCK, GROUP)
    tl.store(LSE + tl.program_id(0), lse2)


def cross_entropy_grad_(logits: torch.Tensor, targets: torch.Tensor, scale: float) -> torch.Tensor:
    """Per-row float32 loss; `logits` ([rows, vocab], rows contiguous) become the gradient
    (softmax − one-hot) · scale in place."""
    rows, vocab = _check_logits(logits)
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    tuned_launch(_ce_kernel, lambda meta: (rows,), (vocab, str(logits.dtype)),
                 (logits, targets, loss, logits.stride(0), vocab, scale), {"GROUP": GROUP})
    return loss


def cross_entropy_lse2(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row float32 loss and logsumexp in log2 units (what softmax_minus_onehot takes), the
    logits left as they are: for a kernel that makes the gradient where it is needed."""
    rows, vocab = _check_logits(logits)
    loss, lse2 = torch.empty(2, rows, dtype=torch.float32, device=logits.device)
    tuned_launch(_loss_lse_kernel, lambda meta: (rows,), (vocab, str(logits.dtype)),
                 (logits, targets, loss, lse2, logits.stride(0), vocab), {"GROUP": GROUP})
    return loss, lse2


def _check_logits(logits: torch.Tensor) -> tuple[int, int]:
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(f"logits must be [rows, vocab] with contiguous rows, got {tuple(logits.shape)}")
    return logits.shape
