"""FlashAttention-2 forward and backward as Triton kernels, wrapped in an autograd.Function.

Layout: q, k, v are [batch, heads, seq, head_dim], made contiguous; programs are laid out as
(sequence blocks, batch·heads). Scores are kept in log2 units (scale · log2 e) so the kernels use
exp2. Forward saves O and L = m + log2(l) per row. Backward is three kernels and no atomics:
  1. D = rowsum(dO ∘ O)                          (pre-pass)
  2. dK, dV: one program per key block, looping over the query blocks that see it
  3. dQ:     one program per query block, looping over the key blocks it sees
Causal forward splits the key loop into unmasked off-diagonal blocks and the masked diagonal.
Any sequence length works (edges are masked); head dims up to 128 (padded to a power of two).
Tile sizes are autotuned per (sequence, head dim, causal); the interpreter uses one small tile.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
MAX_HEAD_DIM = 128


def _configs(shapes: list[tuple[int, int, int, int]]) -> list[triton.Config]:
    """(BLOCK_M, BLOCK_N, warps, stages) candidates; the interpreter gets one small tile, and
    TRAINPERF_TRITON_TUNE=0 keeps only the first (quick compiles for correctness tests)."""
    if INTERPRET:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)]
    if os.environ.get("TRAINPERF_TRITON_TUNE") == "0":
        shapes = shapes[:1]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for m, n, w, s in shapes]


# A short list of shapes that suit Hopper and Ampere; autotuning picks per (seq, head dim, causal).
FWD_CONFIGS = _configs([(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3),
                        (128, 32, 4, 4), (64, 32, 4, 4)])
BWD_CONFIGS = _configs([(64, 64, 4, 3), (32, 128, 4, 2), (64, 128, 8, 2), (128, 128, 8, 2),
                        (32, 64, 4, 3)])
TUNE_KEY = ["N_CTX", "HEAD_DIM", "CAUSAL"]


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_d, lo, hi, N_CTX, qk_scale,
               HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK_CAUSAL: tl.constexpr,
               MASK_EDGE: tl.constexpr, PRECISION: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n[:, None] < N_CTX) & (offs_d[None, :] < HEAD_DIM)
        k = tl.load(k_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        if MASK_CAUSAL:
            qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
        if MASK_EDGE:
            qk = tl.where(offs_n[None, :] < N_CTX, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_ij
    return acc, l_i, m_i


@triton.autotune(configs=FWD_CONFIGS, key=TUNE_KEY)  # every BLOCK_M is a multiple of BLOCK_N
@triton.jit
def _fwd_kernel(Q, K, V, O, L, qk_scale, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                CAUSAL: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    base = tl.program_id(1).to(tl.int64) * N_CTX * HEAD_DIM
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    io_mask = (offs_m[:, None] < N_CTX) & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=io_mask, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        # blocks left of the diagonal: every key is visible and inside the sequence
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, K + base, V + base, offs_m, offs_d, 0, start_m,
                                   N_CTX, qk_scale, HEAD_DIM, BLOCK_N, False, False, PRECISION)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, K + base, V + base, offs_m, offs_d, start_m,
                                   tl.minimum(start_m + BLOCK_M, N_CTX), N_CTX, qk_scale, HEAD_DIM,
                                   BLOCK_N, True, True, PRECISION)
    else:
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, K + base, V + base, offs_m, offs_d, 0, N_CTX,
                                   N_CTX, qk_scale, HEAD_DIM, BLOCK_N, False, True, PRECISION)
    acc = acc / l_i[:, None]
    tl.store(O + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=io_mask)
    tl.store(L + tl.program_id(1).to(tl.int64) * N_CTX + offs_m, m_i + tl.math.log2(l_i),
             mask=offs_m < N_CTX)


@triton.jit
def _bwd_delta_kernel(O, DO, Delta, N_ROWS, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < N_ROWS) & (offs_d[None, :] < HEAD_DIM)
    ptrs = rows[:, None].to(tl.int64) * HEAD_DIM + offs_d[None, :]
    o = tl.load(O + ptrs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Delta + rows, tl.sum(o * do, 1), mask=rows < N_ROWS)


@triton.autotune(configs=BWD_CONFIGS, key=TUNE_KEY)
@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, L, Delta, DK, DV, qk_scale, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                     BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1).to(tl.int64)
    base, row_base = bh * N_CTX * HEAD_DIM, bh * N_CTX
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n[:, None] < N_CTX) & (offs_d[None, :] < HEAD_DIM)
    kv_ptrs = base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    k = tl.load(K + kv_ptrs, mask=kv_mask, other=0.0)
    v = tl.load(V + kv_ptrs, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for start_m in range(lo, N_CTX, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_mask = (offs_m[:, None] < N_CTX) & (offs_d[None, :] < HEAD_DIM)
        q_ptrs = base + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        q = tl.load(Q + q_ptrs, mask=q_mask, other=0.0)
        do = tl.load(DO + q_ptrs, mask=q_mask, other=0.0)
        lse = tl.load(L + row_base + offs_m, mask=offs_m < N_CTX, other=0.0)
        delta = tl.load(Delta + row_base + offs_m, mask=offs_m < N_CTX, other=0.0)
        qk_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale  # [BLOCK_N, BLOCK_M]
        p_t = tl.math.exp2(qk_t - lse[None, :])
        keep = offs_m[None, :] < N_CTX
        if CAUSAL:
            keep = keep & (offs_m[None, :] >= offs_n[:, None])
        p_t = tl.where(keep, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
    tl.store(DK + kv_ptrs, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + kv_ptrs, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.autotune(configs=BWD_CONFIGS, key=TUNE_KEY)
@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, L, Delta, DQ, qk_scale, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                   BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    base, row_base = bh * N_CTX * HEAD_DIM, bh * N_CTX
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m[:, None] < N_CTX) & (offs_d[None, :] < HEAD_DIM)
    q_ptrs = base + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(Q + q_ptrs, mask=q_mask, other=0.0)
    do = tl.load(DO + q_ptrs, mask=q_mask, other=0.0)
    lse = tl.load(L + row_base + offs_m, mask=offs_m < N_CTX, other=0.0)
    delta = tl.load(Delta + row_base + offs_m, mask=offs_m < N_CTX, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = tl.minimum(start_m + BLOCK_M, N_CTX) if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n[:, None] < N_CTX) & (offs_d[None, :] < HEAD_DIM)
        kv_ptrs = base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(K + kv_ptrs, mask=kv_mask, other=0.0)
        v = tl.load(V + kv_ptrs, mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        p = tl.math.exp2(qk - lse[:, None])
        keep = offs_n[None, :] < N_CTX
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + q_ptrs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


def _launch_args(q: torch.Tensor) -> dict:
    d = q.shape[-1]
    return {"HEAD_DIM": d, "BLOCK_D": max(16, triton.next_power_of_2(d)),
            "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32"}


class FlashAttentionTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float):  # noqa: ANN001, ANN205
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        b, h, n, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty((b * h, n), dtype=torch.float32, device=q.device)
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_M"]), b * h)  # noqa: E731
        _fwd_kernel[grid](q, k, v, out, lse, scale * LOG2E, n, CAUSAL=causal, **_launch_args(q))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, dout):  # noqa: ANN001, ANN205
        q, k, v, out, lse = ctx.saved_tensors
        b, h, n, _ = q.shape
        dout = dout.contiguous()
        args = _launch_args(q)
        delta = torch.empty_like(lse)
        rows, block_r = b * h * n, 64
        _bwd_delta_kernel[(triton.cdiv(rows, block_r),)](out, dout, delta, rows, args["HEAD_DIM"],
                                                        args["BLOCK_D"], block_r)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        common = (lse, delta)
        scales = (ctx.scale * LOG2E, ctx.scale, n)
        _bwd_dkdv_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), b * h)](
            q, k, v, dout, *common, dk, dv, *scales, CAUSAL=ctx.causal, **args)
        _bwd_dq_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_M"]), b * h)](
            q, k, v, dout, *common, dq, *scales, CAUSAL=ctx.causal, **args)
        return dq, dk, dv, None, None


def flash_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                           scale: float | None = None) -> torch.Tensor:
    """FlashAttention-2 (Triton) for [batch, heads, seq, head_dim] fp16/bf16/fp32 tensors."""
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError("triton-fa2 needs q, k, v of one shape [batch, heads, seq, head_dim]; "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"triton-fa2 supports head dims up to {MAX_HEAD_DIM}, got {q.shape[-1]}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"triton-fa2 supports fp16, bf16 and fp32, got {q.dtype}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return FlashAttentionTriton.apply(q, k, v, causal, scale)
