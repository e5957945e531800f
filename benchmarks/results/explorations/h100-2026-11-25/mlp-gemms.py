"""Which GEMMs of the fused SwiGLU MLP run faster in cuBLAS than in quack, Llama-3.2-1B's MLP.

python3 mlp-gemms.py TOKENS...: for each token count, the milliseconds of each of the MLP's five
GEMMs in quack (tuned, as `--swiglu quack` calls them) and in torch.mm (cuBLAS), then the whole
MLP forward + backward three ways: quack's mlp_func (what `--swiglu quack` runs), quack's two
fused-epilogue GEMMs with cuBLAS for the other four, and stock PyTorch. Median of 30 after warm-up,
with the SM clock and power read while timing (never changed).
"""

import statistics
import sys

import pynvml
import torch
import torch.nn.functional as F

from trainperf.kernels.quack_mlp import _load_quack

_load_quack()  # keys the DSL objects quack's epilogue cache cannot key itself
from quack.gemm_interface import gemm, gemm_dgated, gemm_gated  # noqa: E402
from quack.mlp import mlp_func  # noqa: E402

HIDDEN, INTER = 2048, 8192
pynvml.nvmlInit()
NVML = pynvml.nvmlDeviceGetHandleByIndex(0)


def timed(fn, reps: int = 30) -> tuple[float, float, float]:
    for _ in range(5):
        fn()
    times, clocks, watts = [], [], []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        clocks.append(pynvml.nvmlDeviceGetClockInfo(NVML, pynvml.NVML_CLOCK_SM))
        watts.append(pynvml.nvmlDeviceGetPowerUsage(NVML) / 1000)
    return statistics.median(times), statistics.median(clocks), statistics.median(watts)


class Hybrid(torch.autograd.Function):
    """quack's SwiGLU-epilogue GEMMs, cuBLAS for the plain ones; gate_up interleaved (g0 u0 g1 u1)."""

    @staticmethod
    def forward(ctx, x, w_il, w_down):
        preact, h = gemm_gated(x, w_il.T, activation="swiglu")
        ctx.save_for_backward(x, w_il, w_down, preact)
        return h @ w_down.T

    @staticmethod
    def backward(ctx, dy):
        x, w_il, w_down, preact = ctx.saved_tensors
        dpre, h = gemm_dgated(dy, w_down, preact, activation="swiglu")
        return dpre @ w_il, dpre.T @ x, dy.T @ h


def row(name: str, fn, flops: float) -> None:
    ms, mhz, w = timed(fn)
    print(f"{name:34s} {ms:8.3f} ms {flops / ms / 1e9:6.0f} TFLOP/s {mhz:5.0f} MHz {w:4.0f} W", flush=True)


def main(tokens: int) -> None:
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(tokens, HIDDEN, device=dev, dtype=bf)
    w_gu = torch.randn(2 * INTER, HIDDEN, device=dev, dtype=bf) * HIDDEN ** -0.5
    w_down = torch.randn(HIDDEN, INTER, device=dev, dtype=bf) * INTER ** -0.5
    h = torch.randn(tokens, INTER, device=dev, dtype=bf)
    dy = torch.randn(tokens, HIDDEN, device=dev, dtype=bf)
    dpre = torch.randn(tokens, 2 * INTER, device=dev, dtype=bf)
    big, small = 2 * tokens * HIDDEN * 2 * INTER, 2 * tokens * HIDDEN * INTER
    print(f"== {tokens} tokens")
    row("gate_up fwd + swiglu   quack", lambda: gemm_gated(x, w_gu.T, activation="swiglu"), big)
    row("gate_up fwd (plain)    cuBLAS", lambda: x @ w_gu.T, big)
    row("down fwd               quack", lambda: gemm(h, w_down.T), small)
    row("down fwd               cuBLAS", lambda: h @ w_down.T, small)
    pre = x @ w_gu.T
    row("dh + dswiglu           quack", lambda: gemm_dgated(dy, w_down, pre, activation="swiglu"), small)
    row("dh (plain)             cuBLAS", lambda: dy @ w_down, small)
    row("d down weight          quack", lambda: gemm(dy.T, h, dynamic_scheduler=True), small)
    row("d down weight          cuBLAS", lambda: dy.T @ h, small)
    row("dx                     quack", lambda: gemm(dpre, w_gu, dynamic_scheduler=True), big)
    row("dx                     cuBLAS", lambda: dpre @ w_gu, big)
    row("d gate_up weight       quack", lambda: gemm(dpre.T, x, dynamic_scheduler=True), big)
    row("d gate_up weight       cuBLAS", lambda: dpre.T @ x, big)

    xs = x.clone().requires_grad_()
    wg = w_gu.clone().requires_grad_()
    wd = w_down.clone().requires_grad_()
    g = torch.randn(tokens, HIDDEN, device=dev, dtype=bf)
    w_il = w_gu.view(2, INTER, HIDDEN).transpose(0, 1).reshape(2 * INTER, HIDDEN).clone().requires_grad_()

    def stock():
        gate, up = F.linear(xs, wg).chunk(2, dim=-1)
        F.linear(F.silu(gate) * up, wd).backward(g)

    def quack_mlp():
        mlp_func(xs, wg, wd, activation="swiglu", tuned=True, concat_layout=True).backward(g)

    def hybrid():
        Hybrid.apply(xs, w_il, wd).backward(g)

    mlp = 3 * (big + small)
    for name, fn in [("MLP fwd+bwd stock", stock), ("MLP fwd+bwd quack mlp_func", quack_mlp),
                     ("MLP fwd+bwd hybrid", hybrid)]:
        row(name, fn, mlp)
    # The hybrid against stock's gradients (gate_up's rows de-interleaved).
    ref = []
    for fn, ws in [(stock, (wg, wd)), (hybrid, (w_il, wd))]:
        for t in (xs, *ws):
            t.grad = None
        fn()
        gw = ws[0].grad
        if fn is hybrid:
            gw = gw.view(INTER, 2, HIDDEN).transpose(0, 1).reshape(2 * INTER, HIDDEN)
        ref.append((xs.grad.float(), gw.float(), ws[1].grad.float()))
    for name, a, b in zip(("dx", "d gate_up", "d down"), *ref, strict=True):
        print(f"hybrid vs stock {name}: relative error {((a - b).norm() / a.norm()).item():.2e}")


for arg in sys.argv[1:]:
    main(int(arg))
