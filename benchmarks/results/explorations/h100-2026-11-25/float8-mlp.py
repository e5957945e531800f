"""The float8 MLP (kernels/float8_mlp.py) alone on the GPU: error against float64 and fwd + bwd time
against the bf16 MLP of `torch.compile`, at the Llama-3.2-1B MLP (2048 -> 2 x 8192 -> 2048).

python3 benchmarks/results/explorations/h100-2026-11-25/float8-mlp.py TOKENS...
"""

import sys

import torch
import torch.nn.functional as F

from trainperf.kernels.float8_mlp import Float8SwiGLUMLP

D, FF = 2048, 8192


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(D, FF, bias=False)
        self.up_proj = torch.nn.Linear(D, FF, bias=False)
        self.down_proj = torch.nn.Linear(FF, D, bias=False)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def timed(fn, n: int = 10) -> float:  # noqa: ANN001
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b).norm() / b.norm()).item()


def main() -> None:
    torch.manual_seed(0)
    ref = Mlp().cuda().double()
    bf16 = Mlp().cuda().bfloat16()
    bf16.load_state_dict(ref.state_dict())
    f8 = Float8SwiGLUMLP(bf16)
    compiled = torch.compile(bf16)
    for tokens in map(int, sys.argv[1:]):
        x = torch.randn(tokens, D, device="cuda")
        dy = torch.randn(tokens, D, device="cuda") / 50
        xr = x.double().requires_grad_()
        ref(xr).backward(dy.double())
        for step in range(3):
            xf = x.bfloat16().requires_grad_()
            y = f8(xf)
            y.backward(dy.bfloat16())
            stacked = torch.cat([ref.gate_proj.weight.grad, ref.up_proj.weight.grad])
            print(f"{tokens} step {step}: y {rel(y, ref(xr.detach())):.4f}  dx {rel(xf.grad, xr.grad):.4f}  "
                  f"dW_gu {rel(f8.gate_up.weight.grad, stacked):.4f}  "
                  f"dW_d {rel(f8.down_proj.weight.grad, ref.down_proj.weight.grad):.4f}", flush=True)
            f8.zero_grad()
        xb = x.bfloat16().requires_grad_()
        g = dy.bfloat16()
        for name, mod in (("compile-bf16", compiled), ("float8", f8)) * 2:
            ms = timed(lambda mod=mod, xb=xb, g=g: mod(xb).backward(g))
            flops = 6 * tokens * D * 3 * FF
            print(f"{tokens} {name:14s} fwd+bwd {ms:.3f} ms ({flops / ms / 1e9:.0f} TFLOP/s)", flush=True)
        ref.zero_grad()


if __name__ == "__main__":
    main()
