"""Is the chunked loss's cross-entropy kernel bound by its exponentials?

A first pass that keeps a running max per element (lane) costs two exponentials per element
there (its own and the rescale of its lane's sum) and one more in the second pass: 3 × 2.4e9 on
the 18,432 × 128,256 logits of a 24 × 768 step, about 2.3 ms of the H100's special-function
units at 1.47 GHz, against ~3.2 ms for its bytes. Variants that rescale once per group of G
elements (G = the whole block: one block-wide max per step) need 1 + 1/G exponentials in the
first pass; the chunked loss's kernel now keeps groups of 16, and the per-element form is kept
here as the baseline. Each variant is checked against float64 and timed on one logits block in
alternating rounds (median of each round, the autotuner's pick for each).
Usage: PYTHONPATH=src python3 benchmarks/probes/ce_exp_count.py [rows] [vocab] [rounds]
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from trainperf.kernels.chunked_loss import cross_entropy_grad_reference
from trainperf.kernels.cross_entropy import CONFIGS, _ce_kernel  # groups of GROUP (16)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU under TRITON_INTERPRET=1


@triton.autotune(configs=CONFIGS, key=["V"], restore_value=["X"])
@triton.jit
def _ce_lanes(X, T, LOSS, stride, V, scale, BLOCK: tl.constexpr):
    """A running max per element (lane), the kernel's earlier form: two exponentials per element
    in the first pass."""
    row_ptr = X + tl.program_id(0).to(tl.int64) * stride
    target = tl.load(T + tl.program_id(0))
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = tl.where(m_new > float("-inf"), s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
        m = m_new
    m_row = tl.max(m, 0)
    lse = m_row + tl.log(tl.sum(s * tl.exp(m - m_row), 0))
    x_target = tl.load(row_ptr + target).to(tl.float32)
    tl.store(LOSS + tl.program_id(0), lse - x_target)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < V, other=0.0).to(tl.float32)
        g = tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)
        tl.store(row_ptr + cols, (g * scale).to(X.dtype.element_ty), mask=cols < V)


@triton.autotune(configs=CONFIGS, key=["V"], restore_value=["X"])
@triton.jit
def _ce_block_max(X, T, LOSS, stride, V, scale, BLOCK: tl.constexpr):
    """One max over the whole block per step: one exponential per element in each pass."""
    row_ptr = X + tl.program_id(0).to(tl.int64) * stride
    target = tl.load(T + tl.program_id(0))
    m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)
    s = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m, tl.max(x, 0))
        s = s * tl.exp2(m - m_new) + tl.sum(tl.exp2(x - m_new), 0)
        m = m_new
    lse2 = m + tl.log2(s)
    x_target = tl.load(row_ptr + target).to(tl.float32)
    tl.store(LOSS + tl.program_id(0), lse2 * 0.6931471805599453 - x_target)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < V, other=0.0).to(tl.float32)
        g = tl.exp2(x * 1.4426950408889634 - lse2) - tl.where(cols == target, 1.0, 0.0)
        tl.store(row_ptr + cols, (g * scale).to(X.dtype.element_ty), mask=cols < V)


def launch(kernel, logits: torch.Tensor, targets: torch.Tensor, scale: float) -> torch.Tensor:
    """`kernel` is a Triton kernel, or (the chunked loss's kernel, its GROUP)."""
    rows, vocab = logits.shape
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    kernel, group = kernel if isinstance(kernel, tuple) else (kernel, None)
    extra = {} if group is None else {"GROUP": group}
    kernel[(rows,)](logits, targets, loss, logits.stride(0), vocab, scale, **extra)
    return loss


def check(kernel, vocab: int, rows: int = 64) -> str:
    """Relative error of loss and gradient against float64, on fresh logits with a spread like an
    LM head's (and a few large ones, so the running max moves)."""
    x = torch.randn(rows, vocab, device=DEVICE) * 3
    x[:, torch.randint(0, vocab, (8,))] += 20
    x = x.to(torch.bfloat16)
    t = torch.randint(0, vocab, (rows,), device=DEVICE)
    ref_loss, ref_grad = cross_entropy_grad_reference(x.double(), t, 1.0 / rows)
    g = x.clone()
    loss = launch(kernel, g, t, 1.0 / rows)
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()  # noqa: E731
    return f"loss {rel(loss, ref_loss):.2e} grad {rel(g, ref_grad):.2e} nan {bool(g.isnan().any())}"


def main(rows: int = 8192, vocab: int = 128256, rounds: int = 5) -> None:
    kernels = {"per element": _ce_lanes, "block max": _ce_block_max,
               **{f"groups of {g}": (_ce_kernel, g) for g in (8, 16, 32)}}
    logits = torch.randn(rows, vocab, device=DEVICE, dtype=torch.bfloat16)
    targets = torch.randint(0, vocab, (rows,), device=DEVICE)
    moved = 2 * logits.numel() * logits.element_size()
    for name, k in kernels.items():
        print(f"{name:14s} {check(k, vocab)}", flush=True)
        launch(k, logits, targets, 1.0 / rows)  # tunes
        print(f"{'':14s} chosen {(k[0] if isinstance(k, tuple) else k).best_config}", flush=True)
    times = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, k in kernels.items():
            times[name].append(triton.testing.do_bench(lambda k=k: launch(k, logits, targets, 1.0 / rows),
                                                       warmup=50, rep=300, return_mode="median"))
    base = sorted(times["per element"])[rounds // 2]
    print(f"{rows} x {vocab} bf16, median of {rounds} rounds (each a median):")
    for name, ts in times.items():
        t = sorted(ts)[rounds // 2]
        print(f"{name:14s} {t:.4f} ms  {moved / t / 1e6:5.0f} GB/s (read once, written once)  "
              f"{base / t:.3f}x  rounds {' '.join(f'{x:.4f}' for x in ts)}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
