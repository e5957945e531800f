"""FlashAttention-2 forward and backward as Triton kernels, wrapped in an autograd.Function.

Layout: q, k, v are [batch, heads, seq, head_dim], made contiguous; programs are laid out as
(sequence blocks, batch·heads). Scores are kept in log2 units (scale · log2 e) so the kernels use
exp2. Forward saves O and L = m + log2(l) per row. Backward is two kernels and no atomics:
  1. dQ:     one program per query block, looping over the key blocks it sees; it also computes
             its rows' D = rowsum(dO ∘ O) first and stores them for the next kernel
  2. dK, dV: one program per key block, looping over the query blocks that see it
or, with `atomic_dq` (`triton-fa2-atomic`), a D pre-pass and then the dK/dV kernel alone, which
also adds each tile's share of dQ (dSᵀ·K) into a float32 buffer, so QKᵀ and dP are computed once
per tile pair (5 matrix products instead of 7) at the price of float32 reduction traffic.
On Hopper and later the backward loops read their tiles through the TMA unit with tensor
descriptors: the dK/dV kernel Q, dO, L and D (13% faster than cp.async loads at the reference
shape, with 194 registers per thread instead of 255), the dQ kernel K and V (2-5% faster). The
atomic variant then also sends each dQ share as one bulk TMA reduction per tile. Elsewhere, and
in the interpreter (which lacks descriptor reductions), the loads are plain and the shares go as
element-wise atomics. The forward keeps cp.async loads (descriptors measured no faster there).
Every loop is split into full blocks, which run without masks, and the few blocks that need
one (the causal diagonal, the ragged end of the sequence). With a causal mask every kernel's
programs take their blocks longest-first, a few heads at a time (`_schedule`).
Any sequence length works; head dims up to 128 (padded to a power of two).
Tile sizes are autotuned per (sequence, head dim, causal); the interpreter uses one small tile.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from trainperf.kernels import interpreting, tune_candidates
from trainperf.kernels.tuning import Launch, bench, compile_untuned, tuned_launch

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 128
HEAD_GROUP = 4  # heads whose causal blocks are ordered together (`_schedule`; docs/attention-kernel.md)


def _configs(shapes: list[tuple[int, int, int, int]], interpret: tuple[int, int]) -> list[triton.Config]:
    """(BLOCK_M, BLOCK_N, warps, stages) candidates (`tune_candidates`). The interpreter gets one
    small tile with BLOCK_M != BLOCK_N, so the tests cover diagonals that span several blocks."""
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for m, n, w, s in tune_candidates(shapes, (*interpret, 1, 1))]


# Short lists of shapes that suit Hopper and Ampere; autotuning picks per (seq, head dim, causal).
# The 8-warp 64-wide tiles are for head dim 128, where the fp32 dK/dV (or dQ) accumulators of a
# 4-warp program would not fit in registers. The 2-stage 64x64 dK/dV shape is also for head dim
# 128: with its loads through the TMA unit it keeps two programs on an SM (1.76 ms there against
# 1.93 for the next best). The 64x128 dQ shape (key blocks twice the query block) is
# for the reference shape: 1.288 ms against 1.359 for the best of the others.
# One of BLOCK_M (queries) and BLOCK_N (keys) divides the other (powers of two). In the dK/dV kernel
# BLOCK_N is a multiple of BLOCK_M, so a diagonal never straddles a query block.
FWD_CONFIGS = _configs([(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3),
                        (128, 32, 4, 4), (128, 64, 4, 4), (128, 64, 4, 2), (128, 128, 8, 2)],
                       interpret=(32, 16))
DKDV_CONFIGS = _configs([(64, 64, 4, 3), (32, 128, 4, 3), (32, 128, 4, 5), (64, 128, 8, 3),
                         (64, 128, 4, 3), (32, 64, 4, 4), (64, 128, 8, 2), (32, 128, 8, 4),
                         (64, 64, 8, 3), (32, 64, 8, 3), (64, 64, 4, 2)],
                        interpret=(16, 32))
DQ_CONFIGS = _configs([(64, 64, 4, 3), (128, 32, 4, 3), (128, 32, 4, 5), (128, 64, 8, 3),
                       (128, 64, 4, 3), (64, 32, 4, 4), (128, 64, 8, 2), (128, 32, 8, 4),
                       (64, 64, 8, 3), (64, 32, 8, 3), (64, 128, 4, 3)],
                      interpret=(32, 16))
TUNE_KEY = ["N_CTX", "HEAD_DIM", "CAUSAL"]
FP32_TILE_PER_WARP = 512  # float32: the largest BLOCK_M·BLOCK_N / warps tried (`_small_tiles_for_fp32`)
FP32_STAGES = 3
# bf16/fp16 candidates that won, or came within 2% of the winner, at some shape of the tuning
# sweep (14 shapes, head dims 64 and 128, causal and not: benchmarks/probes/tune_sweep.py);
# the others, never closer than 5%, are left out of the autotuning, which halves a first call's
# compile and timing work. (BLOCK_M, BLOCK_N, warps, stages).
FWD_HALF = {(128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3), (128, 64, 4, 4), (128, 64, 4, 3)}
DKDV_HALF = {(32, 128, 4, 5), (64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 8, 3)}
DQ_HALF = {(128, 64, 4, 3), (128, 64, 8, 3), (64, 128, 4, 3), (64, 32, 4, 4), (64, 64, 4, 3)}


def _tile(c: triton.Config) -> tuple[int, int, int, int]:
    return c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages


def _small_tiles_for_fp32(configs: list[triton.Config]) -> list[triton.Config]:
    """Candidates with small tiles per warp and shallow pipelines: exact ("ieee") float32
    products run on the FMA units, unrolled per thread, so their compile time grows with the tile
    each thread holds and with the stages (on an H100: 3-15 s for these, against 25-48 s for the
    4-warp 64x64 and 32x128 dK/dV tiles). If none qualifies, the one with the least work per warp."""
    def per_warp(c: triton.Config) -> float:
        return c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] / c.num_warps

    small = [c for c in configs if per_warp(c) <= FP32_TILE_PER_WARP and c.num_stages <= FP32_STAGES]
    return small or [min(configs, key=lambda c: (per_warp(c), c.num_stages))]


def _candidates_by_dtype(half: set[tuple[int, int, int, int]]) -> dict:
    """A kernel's `prune_configs_by`: float32 inputs try small tiles, bf16/fp16 inputs the
    candidates in `half` (all of them where none is, as under TRAINPERF_TRITON_TUNE=0)."""
    def prune(configs: list[triton.Config], named_args: dict, **kwargs: object) -> list[triton.Config]:
        if named_args["Q"].dtype == torch.float32:
            return _small_tiles_for_fp32(configs)
        return [c for c in configs if _tile(c) in half] or configs
    return {"early_config_prune": prune}


@triton.jit
def _in_rows(rows, offs_d, N_CTX, HEAD_DIM: tl.constexpr):
    """Mask of a [rows, BLOCK_D] tile: the rows inside the sequence, the columns inside d."""
    return (rows[:, None] < N_CTX) & (offs_d[None, :] < HEAD_DIM)


@triton.jit
def _load_rows(ptr, rows, offs_d, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
               CHECK_ROWS: tl.constexpr):
    """A [rows, BLOCK_D] tile; masks only where a row may lie past the sequence or d is padded,
    so full blocks load unmasked (wider, pipelined loads)."""
    ptrs = ptr + rows[:, None] * HEAD_DIM + offs_d[None, :]
    if CHECK_ROWS:
        tile = tl.load(ptrs, mask=_in_rows(rows, offs_d, N_CTX, HEAD_DIM), other=0.0)
    elif HEAD_DIM == BLOCK_D:
        tile = tl.load(ptrs)
    else:
        tile = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return tile


@triton.jit
def _store_rows(ptr, rows, offs_d, N_CTX, HEAD_DIM: tl.constexpr, tile):
    """Store a [rows, BLOCK_D] tile in `ptr`'s dtype, leaving out rows past the sequence and d."""
    tl.store(ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], tile.to(ptr.dtype.element_ty),
             mask=_in_rows(rows, offs_d, N_CTX, HEAD_DIM))


@triton.jit
def _schedule(CAUSAL: tl.constexpr, HEAVY_LAST: tl.constexpr, HEAD_GROUP: tl.constexpr):
    """(sequence block, batch·head) of this program. The GPU starts programs in launch order
    (program_id(0) fastest). With a causal mask the blocks differ in work, so they go heaviest
    first (the last blocks when HEAVY_LAST, for query blocks; the first, for key blocks), across
    HEAD_GROUP heads at a time. Ordering each head's blocks alone left the last head's heaviest
    blocks to start last, a tail that cost the forward and dQ kernels 5-7% at the reference shape;
    a few heads, not all, keep the K and V that concurrent programs read in L2."""
    block, bh = tl.program_id(0), tl.program_id(1)
    if CAUSAL:
        blocks, heads = tl.num_programs(0), tl.num_programs(1)
        launch = bh * blocks + block
        first_head = launch // (HEAD_GROUP * blocks) * HEAD_GROUP
        group = tl.minimum(heads - first_head, HEAD_GROUP)
        within = launch - first_head * blocks
        block, bh = within // group, first_head + within % group
        if HEAVY_LAST:
            block = blocks - 1 - block
    return block, bh.to(tl.int64)


@triton.jit
def _diagonal_start(start_m, BLOCK_N: tl.constexpr):
    """First key of the block holding query start_m: start_m itself when BLOCK_N divides BLOCK_M,
    else the key block (BLOCK_N a multiple of BLOCK_M) whose keys past the diagonal are masked."""
    return start_m // BLOCK_N * BLOCK_N


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_d, lo, hi, N_CTX, qk_scale,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
               MASK_CAUSAL: tl.constexpr, MASK_EDGE: tl.constexpr, PRECISION: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = _load_rows(k_base, offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_D, MASK_CAUSAL or MASK_EDGE)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if MASK_CAUSAL or MASK_EDGE:
            qk = qk * qk_scale
            if MASK_CAUSAL:  # keys past the sequence are past every valid query too
                qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
            if MASK_EDGE:
                qk = tl.where(offs_n[None, :] < N_CTX, qk, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:  # scale and shift in one fused multiply-add per score
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load_rows(v_base, offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_D, MASK_CAUSAL or MASK_EDGE)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_ij
    return acc, l_i, m_i


@triton.autotune(configs=FWD_CONFIGS, key=TUNE_KEY, prune_configs_by=_candidates_by_dtype(FWD_HALF),
                 do_bench=bench)
@triton.jit
def _fwd_kernel(Q, K, V, O, L, qk_scale, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                CAUSAL: tl.constexpr, PRECISION: tl.constexpr, HEAD_GROUP: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    block, bh = _schedule(CAUSAL, True, HEAD_GROUP)
    start_m = block * BLOCK_M
    base = bh * N_CTX * HEAD_DIM
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_rows(Q + base, offs_m, offs_d, N_CTX, HEAD_DIM, BLOCK_D, True)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    Kb, Vb = K + base, V + base
    if CAUSAL:  # full blocks left of the diagonal, then the masked block(s) holding it
        diag = _diagonal_start(start_m, BLOCK_N)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, Kb, Vb, offs_m, offs_d, 0, diag, N_CTX, qk_scale,
                                   HEAD_DIM, BLOCK_D, BLOCK_N, False, False, PRECISION)
        diag_end = tl.minimum(start_m + BLOCK_M, N_CTX)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, Kb, Vb, offs_m, offs_d, diag, diag_end, N_CTX,
                                   qk_scale, HEAD_DIM, BLOCK_D, BLOCK_N, True, False, PRECISION)
    else:  # full blocks, then the ragged tail (if any) with the edge mask
        n_full = N_CTX - N_CTX % BLOCK_N
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, Kb, Vb, offs_m, offs_d, 0, n_full, N_CTX, qk_scale,
                                   HEAD_DIM, BLOCK_D, BLOCK_N, False, False, PRECISION)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, Kb, Vb, offs_m, offs_d, n_full, N_CTX, N_CTX, qk_scale,
                                   HEAD_DIM, BLOCK_D, BLOCK_N, False, True, PRECISION)
    acc = acc / l_i[:, None]
    _store_rows(O + base, offs_m, offs_d, N_CTX, HEAD_DIM, acc)
    tl.store(L + bh * N_CTX + offs_m, m_i + tl.math.log2(l_i),
             mask=offs_m < N_CTX)


@triton.jit
def _bwd_delta_kernel(O, DO, Delta, N_ROWS, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_d = tl.arange(0, BLOCK_D)
    mask = _in_rows(rows, offs_d, N_ROWS, HEAD_DIM)
    ptrs = rows[:, None].to(tl.int64) * HEAD_DIM + offs_d[None, :]
    o = tl.load(O + ptrs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Delta + rows, tl.sum(o * do, 1), mask=rows < N_ROWS)


# Why the backward needs almost no masks: rows past the sequence load as zeros, so a query row
# there has q = dO = 0 (and L = D = 0) and adds nothing to dK or dV, and a key row there has
# k = v = 0 and adds nothing to dQ; rows of dK/dV/dQ past the sequence are never stored. What is
# left is the causal mask on diagonal blocks and, without causal, the key edge in dQ (there an
# unmasked zero key would give p = 2^(-L), which can overflow).

@triton.jit
def _dkdv_inner(dk, dv, k, v, Q, DO, L, Delta, DQ, offs_n, offs_d, lo, hi, N_CTX, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                MASK_CAUSAL: tl.constexpr, CHECK_ROWS: tl.constexpr, PRECISION: tl.constexpr,
                ATOMIC_DQ: tl.constexpr, TMA: tl.constexpr):
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = _load_tile(Q, start_m, offs_m, offs_d, N_CTX, HEAD_DIM, BLOCK_D, CHECK_ROWS, TMA)
        do = _load_tile(DO, start_m, offs_m, offs_d, N_CTX, HEAD_DIM, BLOCK_D, CHECK_ROWS, TMA)
        if TMA:  # L and D are descriptors too; rows past the sequence load as zeros
            lse = L.load([start_m])
            delta = Delta.load([start_m])
        elif CHECK_ROWS:
            lse = tl.load(L + offs_m, mask=offs_m < N_CTX, other=0.0)
            delta = tl.load(Delta + offs_m, mask=offs_m < N_CTX, other=0.0)
        else:
            lse = tl.load(L + offs_m)
            delta = tl.load(Delta + offs_m)
        s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)
        # issued before the exponentials, which do not need it: its matrix product can run while
        # they do (issued after dV's product, products and exponentials take turns: slower)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :])
        if MASK_CAUSAL:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PRECISION)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk, input_precision=PRECISION)
        if ATOMIC_DQ:  # this key block's share of dQ for these queries
            dq = tl.dot(tl.trans(ds_t), k, input_precision=PRECISION)
            if TMA:  # rows and columns past the tensor are dropped by the TMA unit
                DQ.atomic_add([start_m, 0], dq)
            else:
                tl.atomic_add(DQ + offs_m[:, None] * HEAD_DIM + offs_d[None, :], dq, sem="relaxed",
                              mask=_in_rows(offs_m, offs_d, N_CTX, HEAD_DIM))
    return dk, dv


@triton.jit
def _rows_desc(ptr, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """A tensor descriptor over one head's [N_CTX, HEAD_DIM] rows, read or reduced a
    [BLOCK_M, BLOCK_D] tile at a time by the TMA unit."""
    return tl.make_tensor_descriptor(ptr, shape=[N_CTX, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK_M, BLOCK_D])


@triton.jit
def _tile_source(ptr, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                 TMA: tl.constexpr):
    """What a backward loop reads one head's row tiles from: a descriptor (TMA) or its pointer."""
    if TMA:
        ptr = _rows_desc(ptr, N_CTX, HEAD_DIM, BLOCK_ROWS, BLOCK_D)
    return ptr


@triton.jit
def _load_tile(src, start, rows, offs_d, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
               CHECK_ROWS: tl.constexpr, TMA: tl.constexpr):
    """The tile of rows `start`… from `_tile_source` (the TMA unit fills rows past the end with
    zeros, as the masked load does)."""
    if TMA:
        tile = src.load([start, 0])
    else:
        tile = _load_rows(src, rows, offs_d, N_CTX, HEAD_DIM, BLOCK_D, CHECK_ROWS)
    return tile


# DQ is zeroed before every timing run of the autotuner (the atomic variant adds into it).
@triton.autotune(configs=DKDV_CONFIGS, key=[*TUNE_KEY, "ATOMIC_DQ", "TMA"], reset_to_zero=["DQ"],
                 prune_configs_by=_candidates_by_dtype(DKDV_HALF), do_bench=bench)
@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, L, Delta, DK, DV, DQ, qk_scale, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                     BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                     ATOMIC_DQ: tl.constexpr, TMA: tl.constexpr, HEAD_GROUP: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    block, bh = _schedule(CAUSAL, False, HEAD_GROUP)
    start_n = block * BLOCK_N
    base, row_base = bh * N_CTX * HEAD_DIM, bh * N_CTX
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    k = _load_rows(K + base, offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_D, True)
    v = _load_rows(V + base, offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_D, True)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    Qb = _tile_source(Q + base, N_CTX, HEAD_DIM, BLOCK_M, BLOCK_D, TMA)
    DOb = _tile_source(DO + base, N_CTX, HEAD_DIM, BLOCK_M, BLOCK_D, TMA)
    Lb, Db, DQb = L + row_base, Delta + row_base, DQ + base
    if TMA:  # every tile of the loop comes in (and dQ's shares go out) through the TMA unit
        Lb = tl.make_tensor_descriptor(Lb, shape=[N_CTX], strides=[1], block_shape=[BLOCK_M])
        Db = tl.make_tensor_descriptor(Db, shape=[N_CTX], strides=[1], block_shape=[BLOCK_M])
        if ATOMIC_DQ:
            DQb = _rows_desc(DQb, N_CTX, HEAD_DIM, BLOCK_M, BLOCK_D)
    m_full = N_CTX - N_CTX % BLOCK_M  # query blocks below this lie wholly inside the sequence
    first_full = 0
    if CAUSAL:  # queries before the key block see none of it; the diagonal blocks are masked
        first_full = tl.minimum(start_n + BLOCK_N, N_CTX)
        dk, dv = _dkdv_inner(dk, dv, k, v, Qb, DOb, Lb, Db, DQb, offs_n, offs_d, start_n, first_full,
                             N_CTX, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_M, True, True, PRECISION, ATOMIC_DQ,
                             TMA)
    dk, dv = _dkdv_inner(dk, dv, k, v, Qb, DOb, Lb, Db, DQb, offs_n, offs_d, first_full, m_full, N_CTX,
                         qk_scale, HEAD_DIM, BLOCK_D, BLOCK_M, False, False, PRECISION, ATOMIC_DQ, TMA)
    tail_start = tl.maximum(first_full, m_full)
    dk, dv = _dkdv_inner(dk, dv, k, v, Qb, DOb, Lb, Db, DQb, offs_n, offs_d, tail_start, N_CTX, N_CTX,
                         qk_scale, HEAD_DIM, BLOCK_D, BLOCK_M, False, True, PRECISION, ATOMIC_DQ, TMA)
    _store_rows(DK + base, offs_n, offs_d, N_CTX, HEAD_DIM, dk * sm_scale)
    _store_rows(DV + base, offs_n, offs_d, N_CTX, HEAD_DIM, dv)


@triton.jit
def _dq_inner(dq, q, do, lse, delta, K, V, offs_m, offs_d, lo, hi, N_CTX, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
              MASK_CAUSAL: tl.constexpr, MASK_EDGE: tl.constexpr, PRECISION: tl.constexpr,
              TMA: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K, start_n, offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_D, MASK_CAUSAL or MASK_EDGE, TMA)
        v = _load_tile(V, start_n, offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_D, MASK_CAUSAL or MASK_EDGE, TMA)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # before the exponentials (see dK/dV)
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        if MASK_CAUSAL:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        if MASK_EDGE:
            p = tl.where(offs_n[None, :] < N_CTX, p, 0.0)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    return dq


@triton.autotune(configs=DQ_CONFIGS, key=[*TUNE_KEY, "TMA"], prune_configs_by=_candidates_by_dtype(DQ_HALF),
                 do_bench=bench)
@triton.jit
def _bwd_dq_kernel(Q, K, V, O, DO, L, Delta, DQ, qk_scale, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                   BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                   TMA: tl.constexpr, HEAD_GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    block, bh = _schedule(CAUSAL, True, HEAD_GROUP)
    start_m = block * BLOCK_M
    base, row_base = bh * N_CTX * HEAD_DIM, bh * N_CTX
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_rows(Q + base, offs_m, offs_d, N_CTX, HEAD_DIM, BLOCK_D, True)
    do = _load_rows(DO + base, offs_m, offs_d, N_CTX, HEAD_DIM, BLOCK_D, True)
    lse = tl.load(L + row_base + offs_m, mask=offs_m < N_CTX, other=0.0)
    # D for these rows, here rather than in a pre-pass kernel (one launch and one pass over dO
    # fewer); the dK/dV kernel, launched after this one, reads it back
    o = _load_rows(O + base, offs_m, offs_d, N_CTX, HEAD_DIM, BLOCK_D, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(Delta + row_base + offs_m, delta, mask=offs_m < N_CTX)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    Kb = _tile_source(K + base, N_CTX, HEAD_DIM, BLOCK_N, BLOCK_D, TMA)
    Vb = _tile_source(V + base, N_CTX, HEAD_DIM, BLOCK_N, BLOCK_D, TMA)
    if CAUSAL:  # full key blocks left of the diagonal, then the masked block(s) holding it
        diag = _diagonal_start(start_m, BLOCK_N)
        dq = _dq_inner(dq, q, do, lse, delta, Kb, Vb, offs_m, offs_d, 0, diag, N_CTX, qk_scale, HEAD_DIM,
                       BLOCK_D, BLOCK_N, False, False, PRECISION, TMA)
        diag_end = tl.minimum(start_m + BLOCK_M, N_CTX)
        dq = _dq_inner(dq, q, do, lse, delta, Kb, Vb, offs_m, offs_d, diag, diag_end, N_CTX, qk_scale,
                       HEAD_DIM, BLOCK_D, BLOCK_N, True, False, PRECISION, TMA)
    else:  # full key blocks, then the ragged tail with the edge mask
        n_full = N_CTX - N_CTX % BLOCK_N
        dq = _dq_inner(dq, q, do, lse, delta, Kb, Vb, offs_m, offs_d, 0, n_full, N_CTX, qk_scale, HEAD_DIM,
                       BLOCK_D, BLOCK_N, False, False, PRECISION, TMA)
        dq = _dq_inner(dq, q, do, lse, delta, Kb, Vb, offs_m, offs_d, n_full, N_CTX, N_CTX, qk_scale,
                       HEAD_DIM, BLOCK_D, BLOCK_N, False, True, PRECISION, TMA)
    _store_rows(DQ + base, offs_m, offs_d, N_CTX, HEAD_DIM, dq * sm_scale)


@functools.cache
def _has_tma(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (9, 0)


def _use_tma(q: torch.Tensor) -> bool:
    """Whether the backward kernels can move their tiles with the TMA unit: a GPU with one (Hopper
    on), not the interpreter, and every descriptor's base and rows on 16 bytes: head rows of q
    (then those of the float32 dQ are too) and each head's L and D rows (float32, n per head).
    Device-side descriptors need Triton's scratch allocator, which is set here, on every call:
    Triton keeps it per thread, and backward passes run on autograd's threads."""
    d, n = q.shape[-1], q.shape[-2]
    ok = (not interpreting() and q.is_cuda and _has_tma(q.device.index)
          and d * q.element_size() % 16 == 0 and n * 4 % 16 == 0)
    if ok:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                     device=q.device))
    return ok


def _launch_args(q: torch.Tensor) -> dict:
    d = q.shape[-1]
    return {"HEAD_DIM": d, "BLOCK_D": max(16, triton.next_power_of_2(d)),
            "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32", "HEAD_GROUP": HEAD_GROUP}


def _launch(kernel: triton.runtime.Autotuner, grid_block: str, n: int, bh: int, *args: torch.Tensor | float,
            **constexprs: object) -> Launch:
    """An autotuned kernel's launch (first argument q) on a (sequence blocks, batch·heads) grid,
    tuned per sequence length, dtype and constexprs, for `tuned_launch` (after the first call, or
    from the disk cache in a new process, it launches straight with the choice)."""
    key = (n, str(args[0].dtype), *sorted(constexprs.items()))
    return kernel, lambda meta: (triton.cdiv(n, meta[grid_block]), bh), key, args, constexprs


# The kernels run inside PyTorch custom ops, so torch.compile and CUDA graphs treat them as one
# opaque call each (no graph break, no re-typing of their scalars by Inductor).
@torch.library.custom_op("trainperf::flash_attention_triton", mutates_args=())
def flash_forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                     atomic_dq: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and log-sum-exp (base 2, float32, [batch·heads, seq]); `atomic_dq` is for the backward."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, n, _ = q.shape
    out = torch.empty_like(q)
    lse = torch.empty((b * h, n), dtype=torch.float32, device=q.device)
    tuned_launch(*_launch(_fwd_kernel, "BLOCK_M", n, b * h, q, k, v, out, lse, float(scale) * LOG2E, n,
                          CAUSAL=causal, **_launch_args(q)))
    return out, lse


@flash_forward_op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
      atomic_dq: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, n, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((b * h, n),
                                                                                   dtype=torch.float32)


@torch.library.custom_op("trainperf::flash_attention_triton_backward", mutates_args=())
def flash_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float,
                      atomic_dq: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv: the two-kernel backward (dQ by float32 atomics) or the three-kernel one."""
    q, k, v, out, dout = (t.contiguous() for t in (q, k, v, out, dout))
    b, h, n, _ = q.shape
    args = _launch_args(q)
    delta = torch.empty_like(lse)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    common = (lse, delta)
    scales = (float(scale) * LOG2E, float(scale), n)
    tma = _use_tma(q)
    if atomic_dq:  # D first; the dK/dV kernel accumulates dQ (unscaled) in float32
        rows, block_r = b * h * n, 64
        _bwd_delta_kernel[(triton.cdiv(rows, block_r),)](out, dout, delta, rows, args["HEAD_DIM"],
                                                        args["BLOCK_D"], block_r)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        launches = [_launch(_bwd_dkdv_kernel, "BLOCK_N", n, b * h, q, k, v, dout, *common, dk, dv, dq,
                            *scales, CAUSAL=causal, ATOMIC_DQ=True, TMA=tma, **args)]
    else:  # the dQ kernel writes D, which the dK/dV kernel then reads
        dq = torch.empty_like(q)
        # the dK/dV kernel leaves its DQ alone here, but its autotuner zeroes it before each
        # timing run: give it dK, which the kernel then overwrites
        launches = [_launch(_bwd_dq_kernel, "BLOCK_M", n, b * h, q, k, v, out, dout, *common, dq, *scales,
                            CAUSAL=causal, TMA=tma, **args),
                    _launch(_bwd_dkdv_kernel, "BLOCK_N", n, b * h, q, k, v, dout, *common, dk, dv, dk,
                            *scales, CAUSAL=causal, ATOMIC_DQ=False, TMA=tma, **args)]
    compile_untuned(*launches)
    for launch in launches:
        tuned_launch(*launch)
    if atomic_dq:
        dq = (dq * scale).to(q.dtype)
    return dq, dk, dv


@flash_backward_op.register_fake
def _(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
      lse: torch.Tensor, causal: bool, scale: float,
      atomic_dq: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _setup(ctx, inputs, output) -> None:  # noqa: ANN001
    q, k, v, ctx.causal, ctx.scale, ctx.atomic_dq = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, dout, _d_lse):  # noqa: ANN001, ANN202
    q, k, v, out, lse = ctx.saved_tensors
    grads = flash_backward_op(dout, q, k, v, out, lse, ctx.causal, ctx.scale, ctx.atomic_dq)
    return (*grads, None, None, None)


flash_forward_op.register_autograd(_backward, setup_context=_setup)


def flash_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                           scale: float | None = None, atomic_dq: bool = False) -> torch.Tensor:
    """FlashAttention-2 (Triton) for [batch, heads, seq, head_dim] fp16/bf16/fp32 tensors;
    `atomic_dq` picks the two-kernel backward (dQ by float32 atomics)."""
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError("triton-fa2 needs q, k, v of one shape [batch, heads, seq, head_dim]; "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"triton-fa2 supports head dims up to {MAX_HEAD_DIM}, got {q.shape[-1]}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"triton-fa2 supports fp16, bf16 and fp32, got {q.dtype}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # contiguous here, once: the op saves its inputs for the backward, which then copies none again
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return flash_forward_op(q, k, v, causal, scale, atomic_dq)[0]
