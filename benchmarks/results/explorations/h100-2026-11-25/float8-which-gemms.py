"""Which of the MLP's float8 GEMMs take the loss away from stock's in the parity task.

FQ=fwd,dgrad,wgrad python3 float8-which-gemms.py parity --recipe stock,fq ...: `trainperf`
with the float8 MLP (`--float8 trainperf`) in recipe `fq` (eager) replaced by a bf16 MLP that
rounds the operands of the named GEMMs to float8 first (fake quantization, dynamic tensorwise
scales rounded to powers of two, so each rounded value is exact in bf16): the forward GEMMs
(x·W_guᵀ, h·W_dᵀ), the input-gradient GEMMs (dy·W_d, dgu·W_gu) or the weight-gradient GEMMs
(dyᵀ·h, dguᵀ·x). Activations and weights round to e4m3, gradients to e5m2, as in trainperf's
and torchao's float8.
"""

import os

import torch
import torch.nn.functional as F

from trainperf.cli import app
from trainperf.kernels import float8_mlp
from trainperf.workloads.llama_sdpa import RECIPES

QUANTIZED = set(os.environ["FQ"].split(",")) - {""}
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def rounded(t: torch.Tensor, dtype: torch.dtype, where: str) -> torch.Tensor:
    if where not in QUANTIZED:
        return t
    amax = t.detach().abs().amax().float().clamp(min=1e-12)
    scale = torch.exp2(torch.floor(torch.log2(torch.finfo(dtype).max / amax)))
    return ((t.float() * scale).to(dtype).float() / scale).to(t.dtype)


class FakeFloat8MLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_gu, w_d):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        gu = rounded(x, E4M3, "fwd") @ rounded(w_gu, E4M3, "fwd").T
        g, u = gu.chunk(2, dim=-1)
        h = F.silu(g) * u
        ctx.save_for_backward(x, gu, h, w_gu, w_d)
        ctx.shape = shape
        return (rounded(h, E4M3, "fwd") @ rounded(w_d, E4M3, "fwd").T).reshape(*shape[:-1], -1)

    @staticmethod
    def backward(ctx, dy):
        x, gu, h, w_gu, w_d = ctx.saved_tensors
        dy = dy.reshape(-1, dy.shape[-1])
        dh = rounded(dy, E5M2, "dgrad") @ rounded(w_d, E4M3, "dgrad")
        grad_w_d = rounded(dy, E5M2, "wgrad").T @ rounded(h, E4M3, "wgrad")
        dgu = float8_mlp.swiglu_grad_reference(dh, gu).to(dy.dtype)
        dx = rounded(dgu, E5M2, "dgrad") @ rounded(w_gu, E4M3, "dgrad")
        grad_w_gu = rounded(dgu, E5M2, "wgrad").T @ rounded(x, E4M3, "wgrad")
        return dx.reshape(ctx.shape), grad_w_gu, grad_w_d


RECIPES["fq"] = {"float8": "trainperf"}  # eager, the parity task's cuDNN attention
float8_mlp._float8_mlp = lambda x, w_gu, w_d, state: FakeFloat8MLP.apply(x, w_gu, w_d)
app()
