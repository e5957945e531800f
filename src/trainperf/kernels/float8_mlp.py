"""The Llama MLP on float8 GEMMs with delayed scaling (`--float8 trainperf`).

torchao's float8 training scales each tensor from its own amax (dynamic tensorwise scaling): every
cast reads its tensor once for the amax and once more to cast it, and the transposed copies the
weight-gradient GEMMs need cost further passes. In the `fp8` step at 16k tokens on an H100 those
passes took about as long as the float8 GEMMs saved (docs/peers.md). Here each tensor's scale comes
from the largest amax of its last `HISTORY` iterations (delayed scaling, Transformer Engine's
default recipe), so the kernel that produces a tensor casts it as it goes, writes the transposed
copy beside it and records its amax for the iterations after:

  forward   x → x8, x8ᵀ;  gu8 = x8·W_guᵀ;  h = silu(g)·u → h8, h8ᵀ;  y = h8·W_dᵀ
  backward  dy → dy8, dy8ᵀ;  dh = dy8·W_d;  dW_d = dy8ᵀ·h8;  (dg, du) → dgu8, dgu8ᵀ;
            dx = dgu8·W_gu;  dW_gu = dgu8ᵀ·x8

cuBLAS writes the gate and up product gu itself as e4m3 (GATE_UP_IN_FLOAT8), scaled from its history
like the casts, with room for twice its amax: the SwiGLU kernels read half the bytes each way, and
the backward keeps half. The SwiGLU kernel records gu's amax, a value at e4m3's maximum counting
twice (it has outgrown the room and may have saturated), so that the next scales make more.

Activations and weights are e4m3, gradients e5m2. The forward GEMMs accumulate fast, and so do the
backward ones where FAST_BACKWARD says (by default; torchao's default promotes their partial sums to
float32). A tensor's first cast calibrates: its scale then comes from its current amax. A value
beyond its history's amax saturates at the float8 maximum. The step with this MLP is faster than
with torchao's float8, and like it trains within stock's noise (the band of stock's own runs,
docs/peers.md). It is `--float8 trainperf` and the recipe `fp8-trainperf`; `--float8 trainperf-all`
(the recipe `fp8-trainperf-all`) puts the attention projections' products on float8 GEMMs too
(kernels/float8_linear.py); `fp8` stays torchao's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from trainperf.kernels.quack_mlp import FusedSwiGLUMLP

HISTORY = 16  # iterations of amax a scale looks back over
MARGIN = 0  # a scale leaves room for values 2**MARGIN times its history's amax (more did not
# bring the loss to parity: benchmarks/results/explorations/h100-2026-11-25)
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# The tensors with a scale each, by their row in a module's scale state.
X, H, DY, DGU, W_GU, W_D, GU = range(7)
ROLES = 7
# Whether the input and weight gradients' products of the MLP and of the float8 Linears accumulate
# fast too: Hopper's float8 tensor cores then sum in fewer bits than float32 without cuBLAS
# promoting the partial sums. At the 1B step's shapes their error against float64 goes from 1.7e-3,
# the bf16 output's rounding, to at most 3.2e-3 (benchmarks/probes/float8_fast_accum.py), the step
# is 1.02-1.04x faster (float8_step_levers.py) and its loss stays within stock's band.
FAST_BACKWARD = True
# Whether cuBLAS writes the gate and up product as e4m3 at its own delayed scale (role GU), or in bf16.
# The step takes as long either way on an H200; in float8 it keeps half the bytes for the backward
# (4 GB less peak memory in the Llama-3.2-1B step at 1 x 16384: docs/peers.md).
GATE_UP_IN_FLOAT8 = True
# Its scale leaves room for twice its history's amax, so that a value at e4m3's maximum has grown
# past that room (and may have saturated) rather than met its history's amax exactly
GU_MARGIN = 1
# A role's row of a ScaleState's buffer: its history, its latest amax, its scale, and from INV_AT
# (16-byte aligned) the scales cuBLAS reads
STATE_ROW, INV_AT = 32, 24
TILE = (64, 128)  # (rows, columns) of a cast tile
WARPS = 4  # per cast program (benchmarks/probes/float8_cast_tiles.py)
# The SwiGLU kernels' tiles: on an e4m3 gate and up product of Llama-3.2-1B's at 16384 tokens the
# forward takes 191 us at 32 x 256 against 228 at TILE, the backward 306-310 us at 32 x 256 with 8
# warps against 321 at 32 x 128 with 4 and 360 at TILE (benchmarks/probes/float8_swiglu_gate_up.py)
SWIGLU_TILE, SWIGLU_BWD_TILE = (32, 256), (32, 256)
SWIGLU_BWD_WARPS = 8


def float8_max(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).max


# Each kernel computes its tile once, stores it as float8, and reads that float8 tile back in the
# transposed order for the transposed store: Triton 3.6 on Hopper misplaces a quarter of a tile that
# it transposes in registers (tl.trans) when the tile comes from two loads, and the float8 tile read
# back from L2 is a quarter to a sixth of the bytes its bf16 inputs are (1.1-1.3x faster than
# computing the tile again from them).
@triton.jit
def store_float8(v, Y, at, mask, scale, FMAX: tl.constexpr):
    tl.store(Y + at, tl.clamp(v * scale, -FMAX, FMAX).to(Y.dtype.element_ty), mask=mask)


# Relaxed: only later kernels read the amax, and Triton's default acquire-release ordering fences each
# program's loads and stores around its atomic: the casts took 1.09-1.24x as long with it
# (benchmarks/probes/float8_cast_atomics.py), and the step 1% longer at 12 x 1024.
@triton.jit
def atomic_amax(AMAX, v, mask):
    tl.atomic_max(AMAX, tl.max(tl.max(tl.where(mask, tl.abs(v), 0.0), 1), 0), sem="relaxed")


@triton.jit
def tile_of(M, N, BM: tl.constexpr, BN: tl.constexpr, TRANSPOSED: tl.constexpr):
    """This program's tile of an [M, N] tensor as row and column indices shaped [BM, 1] and
    [1, BN], or [1, BM] and [BN, 1] for the transposed tile, with its mask."""
    rows = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    cols = (tl.program_id(1) * BN + tl.arange(0, BN)).to(tl.int64)
    if TRANSPOSED:
        r, c = rows[None, :], cols[:, None]
    else:
        r, c = rows[:, None], cols[None, :]
    return r, c, (r < M) & (c < N)


@triton.jit
def _byte(word, b: tl.constexpr):
    return (word >> (8 * b)) & 0xFF


# Read back and written as 32-bit words of four columns from four rows, each column's four rows
# gathered into one word with shifts and masks: Triton moves a float8 tile it transposes through
# shared memory a byte at a time, about 10 of the SwiGLU backward's 44 PTX instructions an element
# on sm_90; the words form takes that kernel from 361 to 306 us at SWIGLU_BWD_TILE and 16384 tokens
# (benchmarks/probes/float8_transpose_words.py).
@triton.jit
def transpose_back(Y, YT, M, N, ROW, LDT, BM: tl.constexpr, BN: tl.constexpr):
    """This program's tile of Y [M, N] into YT [N, M] (their rows ROW and LDT elements apart),
    after a barrier: the tile is what the program's threads have just stored there. M, N, ROW and
    LDT are multiples of 4 (with_transpose), as are BM and BN."""
    tl.debug_barrier()
    q = (tl.program_id(0) * (BM // 4) + tl.arange(0, BM // 4)).to(tl.int64)[:, None]  # 4 rows each
    j = (tl.program_id(1) * (BN // 4) + tl.arange(0, BN // 4)).to(tl.int64)[None, :]  # 4 columns each
    mask = (q < M // 4) & (j < N // 4)
    at = Y.to(tl.pointer_type(tl.uint32), bitcast=True) + 4 * q * (ROW // 4) + j
    w0 = tl.load(at, mask=mask, other=0)
    w1 = tl.load(at + ROW // 4, mask=mask, other=0)
    w2 = tl.load(at + 2 * (ROW // 4), mask=mask, other=0)
    w3 = tl.load(at + 3 * (ROW // 4), mask=mask, other=0)
    out = YT.to(tl.pointer_type(tl.uint32), bitcast=True) + 4 * j * (LDT // 4) + q
    for b in tl.static_range(4):
        word = _byte(w0, b) | (_byte(w1, b) << 8) | (_byte(w2, b) << 16) | (_byte(w3, b) << 24)
        tl.store(out + b * (LDT // 4), word, mask=mask)


@triton.jit
def _cast_kernel(X, Y, YT, SCALE, AMAX, M, N, FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Y = X·scale and YT = Yᵀ as float8, the amax of X into AMAX."""
    scale = tl.load(SCALE)
    r, c, mask = tile_of(M, N, BM, BN, False)
    x = tl.load(X + r * N + c, mask=mask, other=0.0).to(tl.float32)
    atomic_amax(AMAX, x, mask)
    store_float8(x, Y, r * N + c, mask, scale, FMAX)
    transpose_back(Y, YT, M, N, N, M, BM, BN)


@triton.jit
def _gate_up(GU, r, c, mask, F, GU_INV=None):
    """This tile's g and u from gu = [g | u] (rows of 2F), dequantized by GU_INV where gu is float8."""
    at = GU + r * (2 * F) + c
    g = tl.load(at, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(at + F, mask=mask, other=0.0).to(tl.float32)
    if GU_INV is not None:
        inv = tl.load(GU_INV)
        g, u = g * inv, u * inv
    return g, u


@triton.jit
def _swiglu_kernel(GU, Y, YT, SCALE, AMAX, T, F, FMAX: tl.constexpr, BM: tl.constexpr,
                   BN: tl.constexpr, GU_INV=None, GU_AMAX=None):
    """h = silu(g)·u from gu = [g | u] (rows of 2F), cast into Y [T, F] and YT [F, T]. A float8 gu
    (e4m3, as h) goes into GU_AMAX as its tile's largest raw value, counted twice where it reached
    the maximum (it may have saturated), times its inverse scale GU_INV. Only g is dequantized: the
    kernel computes h / GU_INV and folds GU_INV into h's amax and scale, an e4m3 gu's kernel issuing
    about 29 instructions an element rather than 41 (benchmarks/probes/float8_kernel_instructions.py)."""
    scale = tl.load(SCALE)
    r, c, mask = tile_of(T, F, BM, BN, False)
    g, u = _gate_up(GU, r, c, mask, F)  # masked elements are 0, and so are their h
    inv = 1.0
    if GU_INV is not None:
        inv = tl.load(GU_INV)
        top = tl.max(tl.max(tl.maximum(tl.abs(g), tl.abs(u)), 1), 0)
        tl.atomic_max(GU_AMAX, tl.where(top >= FMAX, 2 * top, top) * inv, sem="relaxed")
        g = g * inv
    h = g * tl.sigmoid(g) * u  # h / inv
    tl.atomic_max(AMAX, tl.max(tl.max(tl.abs(h), 1), 0) * inv, sem="relaxed")
    store_float8(h, Y, r * F + c, mask, scale * inv, FMAX)
    transpose_back(Y, YT, T, F, F, T, BM, BN)


@triton.jit
def _swiglu_grads(DH, GU, r, c, mask, F, GU_INV=None):
    g, u = _gate_up(GU, r, c, mask, F, GU_INV)
    dh = tl.load(DH + r * F + c, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(g)
    return dh * u * sig * (1 + g * (1 - sig)), dh * g * sig


@triton.jit
def _swiglu_bwd_kernel(DH, GU, Y, YT, SCALE, AMAX, T, F, FMAX: tl.constexpr, BM: tl.constexpr,
                       BN: tl.constexpr, GU_INV=None):
    """(dg, du) of h = silu(g)·u, cast into Y = [dg | du] (rows of 2F) and YT [2F, T]; a float8 gu
    is dequantized by GU_INV."""
    scale = tl.load(SCALE)
    r, c, mask = tile_of(T, F, BM, BN, False)
    dg, du = _swiglu_grads(DH, GU, r, c, mask, F, GU_INV)
    atomic_amax(AMAX, tl.maximum(tl.abs(dg), tl.abs(du)), mask)
    store_float8(dg, Y, r * (2 * F) + c, mask, scale, FMAX)
    store_float8(du, Y, r * (2 * F) + c + F, mask, scale, FMAX)
    transpose_back(Y, YT, T, F, 2 * F, T, BM, BN)
    transpose_back(Y + F, YT + F * T, T, F, 2 * F, T, BM, BN)


@triton.jit
def _next_scale_kernel(HIST, NOW, SCALE, INV, FMAX: tl.constexpr, LEN: tl.constexpr):
    """Push NOW (the amax of the last cast, if there was one) onto HIST, zero NOW, and set SCALE
    = FMAX / max(HIST), INV[0] = 1 / SCALE and INV[4] = SCALE."""
    i = tl.arange(0, LEN)
    now = tl.load(NOW)
    hist = tl.load(HIST + i)
    older = tl.load(HIST + i - 1, mask=i > 0, other=0.0)
    tl.debug_barrier()  # every thread has read HIST before any writes it
    hist = tl.where(now > 0, tl.where(i == 0, now, older), hist)
    tl.store(HIST + i, hist)
    amax = tl.max(hist, 0)
    scale = tl.where(amax > 0, FMAX / amax, 1.0)
    tl.store(SCALE, scale)
    tl.store(INV, 1.0 / scale)
    tl.store(INV + 4, scale)
    tl.store(NOW, 0.0)


class ScaleState:
    """The amax histories of a module's tensors (`roles` of them: six for the MLP) and the scales
    taken from them."""

    def __init__(self, device: torch.device, roles: int = ROLES) -> None:
        # One buffer, a row of STATE_ROW floats per role, of which the state's tensors are views: in
        # a compiled backward, torch.compile clones each tensor an operator updates and copies it back
        # after, a kernel each, but views of one buffer once (about 290 kernels fewer an iteration
        # of the Llama-3.2-1B step).
        rows = torch.zeros(roles, STATE_ROW, device=device)
        self.hist = rows[:, :HISTORY]
        self.now = rows[:, HISTORY]  # amax of each tensor's latest cast
        self.scale = rows[:, HISTORY + 1].fill_(1)
        # cuBLAS reads a float8 GEMM's scales from 16-byte aligned addresses: a row each, its first
        # element the inverse scale that dequantizes an operand, its fifth the scale that quantizes
        # an output
        self.inv = rows[:, INV_AT:].fill_(1)
        # whether each tensor has had its first cast; on the CPU, so that reading it waits for nothing
        self.calibrated = torch.zeros(roles, dtype=torch.bool)
        # an MLP's: whether cuBLAS writes its gate and up product in float8 (keep_gate_up_in_bf16)
        self.gate_up_in_float8 = GATE_UP_IN_FLOAT8

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """What the float8 operators take and update, in their order (STATE)."""
        return self.hist, self.now, self.scale, self.inv, self.calibrated

    def next(self, role: int, dtype: torch.dtype, current: torch.Tensor | None = None) -> None:
        """The scale of `role`'s next cast. Uncalibrated, it comes from `current`'s amax."""
        next_scale(*self.tensors(), role, dtype, lambda: current)


def next_scale(hist: torch.Tensor, now: torch.Tensor, scale: torch.Tensor, inv: torch.Tensor,
               calibrated: torch.Tensor, role: int, dtype: torch.dtype,
               current: Callable[[], torch.Tensor | None], margin: int = MARGIN) -> None:
    """ScaleState.next over the state's tensors; `current()` gives the tensor whose amax calibrates,
    and the scale leaves room for 2**margin times the history's amax."""
    if not calibrated[role]:
        now[role] = current().abs().amax().float()
        calibrated[role] = True
    _next_scale_kernel[(1,)](hist[role], now[role:], scale[role:], inv[role],
                             FMAX=float8_max(dtype) / 2**margin, LEN=HISTORY, num_warps=1)


# The casts are operators of their own (torch.library), so that torch.compile traces a layer's
# float8 products whole: their Triton launches and the state they update stay opaque to it, and a
# layer that activation checkpointing wraps still compiles (a graph break there runs it eagerly).
STATE = ("hist", "now", "scale", "inv", "calibrated")


@torch.library.custom_op("trainperf::float8_cast_transposed", mutates_args=STATE)
def _cast_op(x: torch.Tensor, hist: torch.Tensor, now: torch.Tensor, scale: torch.Tensor, inv: torch.Tensor,
             calibrated: torch.Tensor, role: int, e5m2: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return scale_and_cast(x, (hist, now, scale, inv, calibrated), role, E5M2 if e5m2 else E4M3)


def scale_and_cast(x: torch.Tensor, state: tuple[torch.Tensor, ...], role: int,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, N] as float8 at `role`'s next scale (`state`: ScaleState.tensors()) and its transpose,
    in one pass."""
    next_scale(*state, role, dtype, lambda: x)
    m, n = x.shape
    y, yt = with_transpose(m, n, dtype, x.device)
    scale, now = state[2], state[1]
    _cast_kernel[tile_grid(m, n)](x, y, yt, scale[role:], now[role:], m, n,
                                  FMAX=float8_max(dtype), BM=TILE[0], BN=TILE[1], num_warps=WARPS)
    return y, yt


@_cast_op.register_fake
def _(x, hist, now, scale, inv, calibrated, role, e5m2):  # noqa: ANN001, ANN202
    return with_transpose(*x.shape, E5M2 if e5m2 else E4M3, x.device)


@torch.library.custom_op("trainperf::float8_swiglu", mutates_args=STATE)
def _swiglu_op(gu: torch.Tensor, hist: torch.Tensor, now: torch.Tensor, scale: torch.Tensor,
               inv: torch.Tensor, calibrated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t, f = gu.shape[0], gu.shape[1] // 2
    next_scale(hist, now, scale, inv, calibrated, H, E4M3, lambda: swiglu_reference(gate_up_values(gu, inv)))
    h8, h8t = with_transpose(t, f, E4M3, gu.device)
    in_float8 = gu.dtype == E4M3
    _swiglu_kernel[tile_grid(t, f, SWIGLU_TILE)](
        gu, h8, h8t, scale[H:], now[H:], t, f, FMAX=float8_max(E4M3), BM=SWIGLU_TILE[0], BN=SWIGLU_TILE[1],
        GU_INV=inv[GU] if in_float8 else None, GU_AMAX=now[GU:] if in_float8 else None, num_warps=WARPS)
    return h8, h8t


@_swiglu_op.register_fake
def _(gu, hist, now, scale, inv, calibrated):  # noqa: ANN001, ANN202
    return with_transpose(gu.shape[0], gu.shape[1] // 2, E4M3, gu.device)


@torch.library.custom_op("trainperf::float8_swiglu_backward", mutates_args=STATE)
def _swiglu_bwd_op(dh: torch.Tensor, gu: torch.Tensor, hist: torch.Tensor, now: torch.Tensor,
                   scale: torch.Tensor, inv: torch.Tensor, calibrated: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    t, f = dh.shape
    next_scale(hist, now, scale, inv, calibrated, DGU, E5M2,
               lambda: swiglu_grad_reference(dh, gate_up_values(gu, inv)))
    dgu8, dgu8t = with_transpose(t, 2 * f, E5M2, dh.device)
    _swiglu_bwd_kernel[tile_grid(t, f, SWIGLU_BWD_TILE)](
        dh, gu, dgu8, dgu8t, scale[DGU:], now[DGU:], t, f, FMAX=float8_max(E5M2), BM=SWIGLU_BWD_TILE[0],
        BN=SWIGLU_BWD_TILE[1], GU_INV=inv[GU] if gu.dtype == E4M3 else None, num_warps=SWIGLU_BWD_WARPS)
    return dgu8, dgu8t


@_swiglu_bwd_op.register_fake
def _(dh, gu, hist, now, scale, inv, calibrated):  # noqa: ANN001, ANN202
    return with_transpose(dh.shape[0], 2 * dh.shape[1], E5M2, dh.device)


def cast_transposed(x: torch.Tensor, state: ScaleState, role: int,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, N] as float8 at `role`'s scale, and its transpose [N, M], in one pass."""
    return _cast_op(x, *state.tensors(), role, dtype == E5M2)


def gate_up_values(gu: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """The gate and up product's values: a float8 gu dequantized by its role's row of `inv`."""
    return gu.float() * inv[GU, 0] if gu.dtype == E4M3 else gu


def swiglu_reference(gu: torch.Tensor) -> torch.Tensor:
    g, u = gu.float().chunk(2, dim=-1)
    return torch.nn.functional.silu(g) * u


def swiglu_grad_reference(dh: torch.Tensor, gu: torch.Tensor) -> torch.Tensor:
    g, u = gu.float().chunk(2, dim=-1)
    sig, dh = torch.sigmoid(g), dh.float()
    return torch.cat([dh * u * sig * (1 + g * (1 - sig)), dh * g * sig], dim=-1)


def with_transpose(m: int, n: int, dtype: torch.dtype,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty float8 tensors [m, n] and [n, m]: what a cast kernel writes, four values to a word."""
    if m % 4 or n % 4:
        raise ValueError(f"float8 casts write tensors whose dims are multiples of 4, not [{m}, {n}]")
    return (torch.empty(m, n, dtype=dtype, device=device),
            torch.empty(n, m, dtype=dtype, device=device))


def tile_grid(m: int, n: int, tile: tuple[int, int] = TILE) -> tuple[int, int]:
    """The programs of a cast kernel over an [m, n] tensor: one per tile."""
    return triton.cdiv(m, tile[0]), triton.cdiv(n, tile[1])


def check_dims(*dims: int) -> None:
    """ValueError unless a float8 GEMM takes these feature dims (multiples of 16)."""
    if any(dim % 16 for dim in dims):
        raise ValueError(f"float8 GEMMs take dims that are multiples of 16, not {dims}")


def check_tokens(x: torch.Tensor) -> None:
    """ValueError unless x [..., features] has a token count a float8 GEMM takes."""
    if x.numel() // x.shape[-1] % 16:
        raise ValueError(f"float8 GEMMs take a token count that is a multiple of 16, not "
                         f"{x.numel() // x.shape[-1]}")


# The product is an operator of its own too: Inductor's lowering of _scaled_mm (torch 2.11)
# cannot take scales that are elements of the state's tensors, which the casts update.
@torch.library.custom_op("trainperf::float8_mm", mutates_args=())
def _mm_op(a: torch.Tensor, b_t: torch.Tensor, inv: torch.Tensor, ra: int, rb: int,
           fast: bool) -> torch.Tensor:
    return float8_product(a, b_t, inv, ra, rb, fast)


def float8_product(a: torch.Tensor, b_t: torch.Tensor, inv: torch.Tensor, ra: int, rb: int,
                   fast: bool = False, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """a [M, K] · b_tᵀ (b_t [N, K], both float8 and K-contiguous) in `out_dtype`, each operand
    dequantized by its role's row of `inv` (ScaleState.inv)."""
    return torch._scaled_mm(a, b_t.t(), scale_a=inv[ra, 0], scale_b=inv[rb, 0], out_dtype=out_dtype,
                            use_fast_accum=fast)


@_mm_op.register_fake
def _(a, b_t, inv, ra, rb, fast):  # noqa: ANN001, ANN202
    return a.new_empty(a.shape[0], b_t.shape[0], dtype=torch.bfloat16)


def float8_product_as_float8(a: torch.Tensor, b_t: torch.Tensor, inv: torch.Tensor, ra: int, rb: int,
                             ro: int) -> torch.Tensor:
    """a [M, K] · b_tᵀ as e4m3 at role `ro`'s scale (inv[ro, 4]), saturating, with fast accumulation.
    On the GPU cuBLAS quantizes in its epilogue, the output's scale folded into a's (_scaled_mm's
    scale_result does nothing there under torch 2.11); the CPU's _scaled_mm does not saturate, so
    there the product is quantized after it."""
    if a.is_cuda:
        return torch._scaled_mm(a, b_t.t(), scale_a=inv[ra, 0] * inv[ro, 4], scale_b=inv[rb, 0],
                                out_dtype=E4M3, use_fast_accum=True)
    product = float8_product(a, b_t, inv, ra, rb, fast=True, out_dtype=torch.float32)
    fmax = float8_max(E4M3)
    return (product * inv[ro, 4]).clamp(-fmax, fmax).to(E4M3)


@torch.library.custom_op("trainperf::float8_gate_up", mutates_args=STATE)
def _gate_up_op(x8: torch.Tensor, w_gu8: torch.Tensor, hist: torch.Tensor, now: torch.Tensor,
                scale: torch.Tensor, inv: torch.Tensor, calibrated: torch.Tensor) -> torch.Tensor:
    next_scale(hist, now, scale, inv, calibrated, GU, E4M3,
               lambda: float8_product(x8, w_gu8, inv, X, W_GU, fast=True), margin=GU_MARGIN)
    return float8_product_as_float8(x8, w_gu8, inv, X, W_GU, GU)


@_gate_up_op.register_fake
def _(x8, w_gu8, hist, now, scale, inv, calibrated):  # noqa: ANN001, ANN202
    return x8.new_empty(x8.shape[0], w_gu8.shape[0], dtype=E4M3)


def gate_up_product(x8: torch.Tensor, w_gu8: torch.Tensor, state: ScaleState) -> torch.Tensor:
    """gu = x8 · w_gu8ᵀ: e4m3 at its own delayed scale where `state` says, bf16 otherwise."""
    if state.gate_up_in_float8:
        return _gate_up_op(x8, w_gu8, *state.tensors())
    return scaled_mm(x8, w_gu8, state, X, W_GU, fast=True)


def scaled_mm(a: torch.Tensor, b_t: torch.Tensor, state: ScaleState, ra: int, rb: int,
              fast: bool = False) -> torch.Tensor:
    """a [M, K] · b_tᵀ (b_t [N, K], both float8 and K-contiguous), dequantized to bf16."""
    return _mm_op(a, b_t, state.inv, ra, rb, fast)


def as_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in `dtype`, t itself where it is already: a float8 autograd.Function that returns a
    same-dtype `.to()` of its product loses its gradients under torch.compile (torch 2.11: they
    arrive as zeros)."""
    return t if t.dtype == dtype else t.to(dtype)


def mlp_forward(ctx, x8: torch.Tensor, x8t: torch.Tensor, w_gu: torch.Tensor, w_d: torch.Tensor,  # noqa: ANN001
                state: ScaleState) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """down(silu(g)·u) of the cast input x8 [tokens, features] (x8t its transpose) in bf16, and the
    tensors mlp_backward takes, for the caller to save."""
    w_gu8, w_gu8t = cast_transposed(w_gu, state, W_GU, E4M3)
    w_d8, w_d8t = cast_transposed(w_d, state, W_D, E4M3)
    gu = gate_up_product(x8, w_gu8, state)
    h8, h8t = _swiglu_op(gu, *state.tensors())
    ctx.state, ctx.fast = state, FAST_BACKWARD
    return scaled_mm(h8, w_d8, state, H, W_D, fast=True), (x8t, gu, h8t, w_gu8t, w_d8t)


def mlp_backward(ctx, saved: tuple[torch.Tensor, ...], dy: torch.Tensor  # noqa: ANN001
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The input's and the two weights' gradients from dy [tokens, features] (bf16); `saved`:
    the tensors mlp_forward kept, in their order."""
    x8t, gu, h8t, w_gu8t, w_d8t = saved
    state = ctx.state
    dy8, dy8t = cast_transposed(dy.contiguous(), state, DY, E5M2)
    dh = scaled_mm(dy8, w_d8t, state, DY, W_D, ctx.fast)
    grad_w_d = scaled_mm(dy8t, h8t, state, DY, H, ctx.fast)
    dgu8, dgu8t = _swiglu_bwd_op(dh, gu, *state.tensors())
    dx = scaled_mm(dgu8, w_gu8t, state, DGU, W_GU, ctx.fast)
    grad_w_gu = scaled_mm(dgu8t, x8t, state, DGU, X, ctx.fast)
    return dx, grad_w_gu, grad_w_d


class _Float8MLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_gu, w_d, state):  # noqa: ANN001, ANN205
        shape = x.shape
        x8, x8t = cast_transposed(x.reshape(-1, shape[-1]).contiguous(), state, X, E4M3)
        y, saved = mlp_forward(ctx, x8, x8t, w_gu, w_d, state)
        ctx.save_for_backward(*saved)
        ctx.shape = shape
        return as_dtype(y.reshape(*shape[:-1], y.shape[-1]), x.dtype)

    @staticmethod
    def backward(ctx, dy):  # noqa: ANN001, ANN205
        dx, grad_w_gu, grad_w_d = mlp_backward(ctx, ctx.saved_tensors, dy.reshape(-1, dy.shape[-1]))
        return dx.reshape(ctx.shape), grad_w_gu, grad_w_d, None


def keep_gate_up_in_bf16(module: torch.nn.Module) -> None:
    """Have the float8 MLPs in `module`, a layer that activation checkpointing wraps, keep their gate
    and up product in bf16. Recomputed, the float8 product (an operator that updates its scale) would
    take its scale again from a history its own forward has added to, and the backward would see
    another gu; there is no memory to save in a layer whose activations are not kept anyway."""
    for m in module.modules():
        for state in (getattr(m, "float8", None), getattr(m, "state", None)):
            if isinstance(state, ScaleState):
                state.gate_up_in_float8 = False


class Float8SwiGLUMLP(FusedSwiGLUMLP):
    """A Llama MLP (gate and up stacked into `gate_up`) whose three GEMMs each way are float8."""

    def __init__(self, mlp: torch.nn.Module) -> None:
        super().__init__(mlp)
        check_dims(self.gate_up.in_features, self.down_proj.in_features)
        self.state = ScaleState(self.gate_up.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return float8_mlp(x, self.gate_up.weight, self.down_proj.weight, self.state)


def float8_mlp(x: torch.Tensor, w_gu: torch.Tensor, w_d: torch.Tensor, state: ScaleState) -> torch.Tensor:
    """down(silu(g)·u) with [g | u] = x·w_guᵀ (w_gu: gate's and up's weights stacked), every
    product on float8 GEMMs scaled from `state` (a ScaleState of ROLES roles)."""
    check_tokens(x)
    return _Float8MLP.apply(x, w_gu, w_d, state)
