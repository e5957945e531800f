"""Do the float8 MLP's SwiGLU kernels pay for themselves inside the GEMMs' epilogues?

trainperf's float8 MLP (kernels/float8_mlp.py) runs each SwiGLU pass as a kernel of its own beside
cuBLAS's float8 product: forward, gu = x8·W_guᵀ in bf16 and then h = silu(g)·u cast to float8 with
its transpose; backward, dh = dy8·W_d in bf16 and then (dg, du) cast likewise. cuBLAS takes no
custom epilogue, so the Triton GEMMs here do each pair in one kernel: a program multiplies its tile
and, while the tile is in registers, applies SwiGLU (or its backward) and writes the float8 tile
and its transpose with its amax. They save the bf16 round trip of gu (forward) and of dh
(backward), and round each product to bf16 before SwiGLU, as the separate kernels see it.

  forward   gu = x8·W_guᵀ → gu (bf16, saved for the backward), h8, h8ᵀ
  backward  dh = dy8·W_d → (dg, du) → dgu8, dgu8ᵀ

For the Llama-3.2-1B MLP at `tokens` tokens this times both ways in alternating rounds (median of
each) at several tiles, with the operands loaded by pointers or by the tensor memory accelerator
(TMA), beside cuBLAS's product and Triton's alone. It checks the fused outputs against the
separate kernels': gu against the float64 product of the same float8 operands, the share of float8
values that differ, and each transpose against its tile.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_swiglu_epilogue.py [tokens] [width] [ffn] [rounds]
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from trainperf.kernels import float8_mlp as f8
from trainperf.kernels.float8_mlp import (
    DGU,
    DY,
    E4M3,
    E5M2,
    W_D,
    W_GU,
    H,
    X,
    atomic_amax,
    float8_max,
    float8_product,
    next_scale,
    store_float8,
    swiglu_grad_reference,
    swiglu_reference,
    with_transpose,
)

TILES = [dict(BM=bm, BN=bn, BK=128, num_warps=w, num_stages=s, GROUP=8, TMA=tma)
         for tma in (False, True) for bm, bn, w, s in ((128, 128, 8, 3), (128, 64, 4, 4), (128, 64, 8, 4),
                                                      (64, 128, 4, 4), (64, 64, 4, 5))]
# the fastest fused tiles (forward, backward) in the probe's first run on an H200
FORWARD_TILE = dict(BM=64, BN=128, BK=128, num_warps=4, num_stages=4, GROUP=8)
BACKWARD_TILE = dict(BM=128, BN=64, BK=128, num_warps=8, num_stages=4, GROUP=8)


@triton.jit
def _tile_indices(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
    """This program's first row and column, and its rows and columns, programs grouped along M so
    that a group's tiles share their B columns in L2."""
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    per_group = GROUP * tiles_n
    first_m = (pid // per_group) * GROUP
    size_m = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    rows = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)
    cols = (pid_n * BN + tl.arange(0, BN)).to(tl.int64)
    return pid_m * BM, pid_n * BN, rows, cols


@triton.jit
def _operand_tile(A, rows, first, k, N, K, BK: tl.constexpr, TMA: tl.constexpr):
    """A's [rows, k:k+BK] tile (A [N, K] row-major float8, or its tensor descriptor under TMA,
    whose block is [len(rows), BK] and starts at row `first`)."""
    if TMA:
        tile = A.load([first, k])
    else:
        ks = k + tl.arange(0, BK)
        tile = tl.load(A + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < N) & (ks[None, :] < K),
                       other=0.0)
    return tile


@triton.jit
def _gated_forward_kernel(X8, W8, GU, Y, YT, INV_X, INV_W, SCALE, AMAX, T, F, K,
                          FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          GROUP: tl.constexpr, TMA: tl.constexpr):
    """gu = x8·W8ᵀ ([g | u], rows of 2F) in bf16, and h = silu(g)·u cast into Y [T, F] and YT [F, T]."""
    first_row, first_col, rows, cols = _tile_indices(T, F, BM, BN, GROUP)
    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):  # fast accumulation, as the forward's cuBLAS products
        a = _operand_tile(X8, rows, first_row, k, T, K, BK, TMA)
        acc_g = tl.dot(a, tl.trans(_operand_tile(W8, cols, first_col, k, 2 * F, K, BK, TMA)), acc_g)
        acc_u = tl.dot(a, tl.trans(_operand_tile(W8, cols + F, first_col + F, k, 2 * F, K, BK, TMA)), acc_u)
    inv = tl.load(INV_X) * tl.load(INV_W)
    g, u = (acc_g * inv).to(tl.bfloat16), (acc_u * inv).to(tl.bfloat16)
    r, c = rows[:, None], cols[None, :]
    mask = (r < T) & (c < F)
    tl.store(GU + r * (2 * F) + c, g, mask=mask)
    tl.store(GU + r * (2 * F) + c + F, u, mask=mask)
    g, u = g.to(tl.float32), u.to(tl.float32)
    h = g * tl.sigmoid(g) * u
    atomic_amax(AMAX, h, mask)
    scale = tl.load(SCALE)
    store_float8(h, Y, r * F + c, mask, scale, FMAX)
    store_float8(h, YT, c * T + r, mask, scale, FMAX)


@triton.jit
def _gated_backward_kernel(DY8, WDT8, GU, Y, YT, INV_DY, INV_W, SCALE, AMAX, T, F, K,
                           FMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                           GROUP: tl.constexpr, TMA: tl.constexpr):
    """dh = dy8·WDT8ᵀ (WDT8 [F, K]), rounded to bf16, and SwiGLU's (dg, du) from it and gu, cast
    into Y = [dg | du] (rows of 2F) and YT [2F, T]."""
    first_row, first_col, rows, cols = _tile_indices(T, F, BM, BN, GROUP)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):  # partial sums promoted to float32 once a tile, as cuBLAS's
        acc = tl.dot(_operand_tile(DY8, rows, first_row, k, T, K, BK, TMA),
                     tl.trans(_operand_tile(WDT8, cols, first_col, k, F, K, BK, TMA)), acc,
                     max_num_imprecise_acc=BK)
    dh = (acc * (tl.load(INV_DY) * tl.load(INV_W))).to(tl.bfloat16).to(tl.float32)
    r, c = rows[:, None], cols[None, :]
    mask = (r < T) & (c < F)
    g = tl.load(GU + r * (2 * F) + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(GU + r * (2 * F) + c + F, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(g)
    dg = dh * u * sig * (1 + g * (1 - sig))
    du = dh * g * sig
    atomic_amax(AMAX, tl.maximum(tl.abs(dg), tl.abs(du)), mask)
    scale = tl.load(SCALE)
    store_float8(dg, Y, r * (2 * F) + c, mask, scale, FMAX)
    store_float8(du, Y, r * (2 * F) + c + F, mask, scale, FMAX)
    store_float8(dg, YT, c * T + r, mask, scale, FMAX)
    store_float8(du, YT, (c + F) * T + r, mask, scale, FMAX)


def _launch(kernel, tile: dict, t: int, f: int, a: torch.Tensor, b: torch.Tensor, *args) -> None:  # noqa: ANN001
    """`kernel` over [t, f] tiles, its float8 operands `a` and `b` as tensor descriptors where the
    tile asks for TMA."""
    if tile.get("TMA"):
        a = TensorDescriptor.from_tensor(a, [tile["BM"], tile["BK"]])
        b = TensorDescriptor.from_tensor(b, [tile["BN"], tile["BK"]])
    grid = (triton.cdiv(t, tile["BM"]) * triton.cdiv(f, tile["BN"]),)
    kernel[grid](a, b, *args, **{"TMA": False, **tile})


def gated_forward(x8: torch.Tensor, w_gu8: torch.Tensor, state: tuple[torch.Tensor, ...],
                  tile: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(gu in bf16, h8, h8ᵀ) from x8 [T, K] and w_gu8 [2F, K] (float8, scaled by `state`, the
    tensors of a ScaleState of the MLP's roles)."""
    t, k = x8.shape
    f = w_gu8.shape[0] // 2
    hist, now, scale, inv, calibrated = state
    gu = torch.empty(t, 2 * f, dtype=torch.bfloat16, device=x8.device)
    h8, h8t = with_transpose(t, f, E4M3, x8.device)
    next_scale(hist, now, scale, inv, calibrated, H, E4M3, lambda: swiglu_reference(
        float8_product(x8, w_gu8, inv, X, W_GU, fast=True)))
    _launch(_gated_forward_kernel, tile, t, f, x8, w_gu8, gu, h8, h8t, inv[X], inv[W_GU], scale[H:],
            now[H:], t, f, k, float8_max(E4M3))
    return gu, h8, h8t


def gated_backward(dy8: torch.Tensor, w_d8t: torch.Tensor, gu: torch.Tensor, state: tuple[torch.Tensor, ...],
                   tile: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(dgu8, dgu8ᵀ), SwiGLU's gradient as e5m2, from dy8 [T, K], w_d8t [F, K] and gu [T, 2F]."""
    t, k = dy8.shape
    f = w_d8t.shape[0]
    hist, now, scale, inv, calibrated = state
    dgu8, dgu8t = with_transpose(t, 2 * f, E5M2, dy8.device)
    next_scale(hist, now, scale, inv, calibrated, DGU, E5M2, lambda: swiglu_grad_reference(
        float8_product(dy8, w_d8t, inv, DY, W_D), gu))
    _launch(_gated_backward_kernel, tile, t, f, dy8, w_d8t, gu, dgu8, dgu8t, inv[DY], inv[W_D], scale[DGU:],
            now[DGU:], t, f, k, float8_max(E5M2))
    return dgu8, dgu8t


@triton.jit
def _plain_kernel(A, B, C, INV_A, INV_B, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  GROUP: tl.constexpr, TMA: tl.constexpr):
    """C = A·Bᵀ in bf16 with nothing in the epilogue: how fast Triton's float8 GEMM is alone."""
    first_row, first_col, rows, cols = _tile_indices(M, N, BM, BN, GROUP)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(_operand_tile(A, rows, first_row, k, M, K, BK, TMA),
                     tl.trans(_operand_tile(B, cols, first_col, k, N, K, BK, TMA)), acc)
    r, c = rows[:, None], cols[None, :]
    tl.store(C + r * N + c, (acc * tl.load(INV_A) * tl.load(INV_B)).to(tl.bfloat16), mask=(r < M) & (c < N))


def plain_product(state: f8.ScaleState, a: torch.Tensor, b: torch.Tensor, tile: dict) -> torch.Tensor:
    c = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
    _launch(_plain_kernel, tile, a.shape[0], b.shape[0], a, b, c, state.inv[X], state.inv[W_GU],
            a.shape[0], b.shape[0], a.shape[1])
    return c


def operands(t: int, d: int, f: int) -> tuple[f8.ScaleState, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    state = f8.ScaleState(torch.device("cuda"))
    x = torch.randn(t, d, device="cuda", dtype=torch.bfloat16)
    w_gu = 0.02 * torch.randn(2 * f, d, device="cuda", dtype=torch.bfloat16)
    w_d = 0.02 * torch.randn(d, f, device="cuda", dtype=torch.bfloat16)
    dy = 1e-3 * torch.randn(t, d, device="cuda", dtype=torch.bfloat16)
    x8, _ = f8.cast_transposed(x, state, f8.X, f8.E4M3)
    w_gu8, _ = f8.cast_transposed(w_gu, state, f8.W_GU, f8.E4M3)
    _, w_d8t = f8.cast_transposed(w_d, state, f8.W_D, f8.E4M3)
    dy8, _ = f8.cast_transposed(dy, state, f8.DY, f8.E5M2)
    return state, dict(x8=x8, w_gu8=w_gu8, w_d8t=w_d8t, dy8=dy8)


def separate_forward(state, o):  # noqa: ANN001, ANN201
    gu = f8.scaled_mm(o["x8"], o["w_gu8"], state, f8.X, f8.W_GU, fast=True)
    return (gu, *f8._swiglu_op(gu, *state.tensors()))


def separate_backward(state, o, gu):  # noqa: ANN001, ANN201
    dh = f8.scaled_mm(o["dy8"], o["w_d8t"], state, f8.DY, f8.W_D)
    return f8._swiglu_bwd_op(dh, gu, *state.tensors())


def differ(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.view(torch.uint8) != b.view(torch.uint8)).float().mean().item()


def check(state: f8.ScaleState, o: dict, tile_f: dict, tile_b: dict) -> str:
    gu, h8, h8t = separate_forward(state, o)
    dgu8, _ = separate_backward(state, o, gu)
    gu_f, h8_f, h8t_f = gated_forward(o["x8"], o["w_gu8"], state.tensors(), tile_f)
    dgu8_f, dgu8t_f = gated_backward(o["dy8"], o["w_d8t"], gu, state.tensors(), tile_b)
    inv = state.inv[:, 0].double()
    want = (o["x8"].double() * inv[f8.X]) @ (o["w_gu8"].double() * inv[f8.W_GU]).t()
    err = [((g.double() - want).norm() / want.norm()).item()
           for g in (gu, gu_f, plain_product(state, o["x8"], o["w_gu8"], tile_f))]
    return (f"gu relative error against float64: cuBLAS {err[0]:.2e}, fused {err[1]:.2e}, Triton's product "
            f"alone {err[2]:.2e}; float8 values that differ "
            f"from the separate kernels': h8 {differ(h8, h8_f):.2e}, dgu8 {differ(dgu8, dgu8_f):.2e}; "
            f"values of the fused transposes that differ from the transposed outputs: h8ᵀ "
            f"{differ(h8t_f, h8_f.t())}, dgu8ᵀ {differ(dgu8t_f, dgu8_f.t())}")


def main(tokens: int = 12288, width: int = 2048, ffn: int = 8192, rounds: int = 5) -> None:
    state, o = operands(tokens, width, ffn)
    gu = separate_forward(state, o)[0]
    print(f"{torch.cuda.get_device_name()} tokens {tokens} width {width} ffn {ffn}; float8 MLP, "
          f"the scaled product and SwiGLU's kernel apart against one Triton GEMM with SwiGLU in its "
          f"epilogue (median ms of {rounds} rounds)", flush=True)
    for tma in (False, True):
        print(f"TMA {tma}: " + check(state, o, {**FORWARD_TILE, "TMA": tma},
                                     {**BACKWARD_TILE, "TMA": tma}), flush=True)
    cases = {"forward separate": lambda: separate_forward(state, o),
             "backward separate": lambda: separate_backward(state, o, gu),
             "forward product alone": lambda: f8.scaled_mm(o["x8"], o["w_gu8"], state, f8.X, f8.W_GU, True),
             "backward product alone": lambda: f8.scaled_mm(o["dy8"], o["w_d8t"], state, f8.DY, f8.W_D)}
    for tile in TILES:
        name = "{BM}x{BN}x{BK} w{num_warps} s{num_stages} TMA {TMA}".format(**tile)
        cases[f"forward product alone, Triton {name}"] = lambda tile=tile: plain_product(
            state, o["x8"], o["w_gu8"], tile)
        cases[f"forward fused {name}"] = lambda tile=tile: gated_forward(
            o["x8"], o["w_gu8"], state.tensors(), tile)
        cases[f"backward fused {name}"] = lambda tile=tile: gated_backward(
            o["dy8"], o["w_d8t"], gu, state.tensors(), tile)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for name in list(cases):
        try:
            cases[name]()
        except Exception as exc:  # a tile past the shared memory: say so and go on
            print(f"{name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            del cases[name], times[name]
    for _ in range(rounds):
        for name, run in cases.items():
            times[name].append(triton.testing.do_bench(run, warmup=10, rep=50))
    for name, ms in times.items():
        print(f"{name:40s} {statistics.median(ms):7.3f} ms  (min {min(ms):.3f})", flush=True)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
