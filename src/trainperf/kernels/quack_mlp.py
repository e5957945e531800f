"""The Llama MLP with its SwiGLU inside the GEMMs (`--swiglu quack`), on quack's CuTe-DSL kernels.

The gate and up projections become one GEMM against their weights stacked [gate; up]. Its
epilogue writes the pre-activations and h = silu(gate)·up, so the activation takes no pass of its
own over memory. In the backward, the GEMM of the output gradient with the down weight computes
the SwiGLU derivative in its epilogue and recomputes h there for the down weight's gradient, so h
is never saved: 4 GB less at 16k tokens in Llama-3.2-1B on an H100 (docs/peers.md). Given the
decoder layer's residual stream, the down projection's epilogue adds it, so the layer's residual
add takes no pass of its own either (hf_llama.fuse_mlps rewires the layer to hand it over).

quack-kernels comes with FlashAttention 4 (`trainperf[fa4]`) and runs on a Hopper or newer GPU;
elsewhere `--swiglu quack` is an `unsupported` row. The same module computes in PyTorch off the
GPU, the reference the tests check it against.
"""

from __future__ import annotations

import contextvars

import torch
import torch.nn.functional as F

from trainperf.core.errors import Unsupported
from trainperf.core.extras import broken_install, import_problem
from trainperf.core.graph_breaks import outside_graph

INSTALL_QUACK = "pip install 'trainperf[fa4]' (quack-kernels comes with flash-attn-4)"
# looked up once, like FA4's: None, "not installed", or why the installed package does not import
# (its root imports the CuTe DSL, whose Python sources are a wheel of their own; the root alone,
# so that load_quack still keys quack's objects before its GEMM modules load)
_PROBLEM = import_problem("quack")
_INSTALLED = _PROBLEM is None


def quack_runs(device: torch.device) -> bool:
    """Whether quack's fused MLP trains on `device` (installed, and a Hopper or newer GPU)."""
    return (_INSTALLED and device.type == "cuda"
            and torch.cuda.get_device_capability(device) >= (9, 0))


def require_quack(device: torch.device, what: str = "--swiglu quack") -> None:
    """Unsupported (naming the install command, or the GPU it needs) unless quack runs here."""
    if not _INSTALLED:
        raise Unsupported(f"{what} needs quack-kernels{broken_install(_PROBLEM)}: {INSTALL_QUACK}")
    if not quack_runs(device):
        raise Unsupported(f"{what} needs a Hopper or newer GPU (quack's GEMMs run on sm_90+)")


class FusedSwiGLUMLP(torch.nn.Module):
    """A Llama MLP whose gate and up projections are one Linear, `gate_up` (weights [gate; up])."""

    def __init__(self, mlp: torch.nn.Module) -> None:
        super().__init__()
        gate, up = mlp.gate_proj, mlp.up_proj
        if gate.bias is not None or mlp.down_proj.bias is not None:
            raise Unsupported("--swiglu quack takes an MLP without biases")
        self.gate_up = torch.nn.Linear(gate.in_features, 2 * gate.out_features, bias=False,
                                       device=gate.weight.device, dtype=gate.weight.dtype)
        with torch.no_grad():
            self.gate_up.weight.copy_(torch.cat([gate.weight, up.weight]))
        self.down_proj = mlp.down_proj

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The MLP of `x`, plus `residual` when given (the layer's residual add, fused on the GPU)."""
        if x.is_cuda:
            return _quack_mlp(x, self.gate_up.weight, self.down_proj.weight, residual)
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        out = self.down_proj(F.silu(gate) * up)
        return out if residual is None else residual + out


# Outside torch.compile's graphs: in a compiled decoder layer, the step with this graph break was
# faster than with Dynamo tracing quack's autograd functions (0.327 against 0.332 s at 1 x 16384 on
# an H100, benchmarks/results/explorations).
@outside_graph("quack's MLP is faster called between compiled pieces than traced")
def _quack_mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
               residual: torch.Tensor | None) -> torch.Tensor:
    """quack's MLP (its mlp_func with the stacked [gate; up] layout), with the down projection our
    own so that its epilogue can add the residual."""
    load_quack()
    from quack.linear import linear_gated_func

    preact, h = linear_gated_func(x, gate_up, "swiglu", store_preact=torch.is_grad_enabled(), tuned=True,
                                  concat_layout=True)
    return _DownProjection.apply(preact, down, h, residual)


class _DownProjection(torch.autograd.Function):
    """h @ downᵀ (+ residual in the GEMM's epilogue). Like quack's gated_linear_func, it keeps the
    pre-activations instead of h: the backward's GEMM of the output gradient with the down weight
    computes the SwiGLU derivative in its epilogue and recomputes h there for the weight's gradient.
    The residual's gradient is the output's."""

    @staticmethod
    def forward(ctx, preact, down, h, residual):  # noqa: ANN001, ANN205
        from quack.gemm_interface import gemm, gemm_add

        rows = h.flatten(0, -2)
        out = gemm(rows, down.T) if residual is None else gemm_add(rows, down.T, residual.flatten(0, -2))
        ctx.save_for_backward(preact, down)
        ctx.with_residual = residual is not None
        return out.view(*h.shape[:-1], down.shape[0])

    @staticmethod
    def backward(ctx, dout):  # noqa: ANN001, ANN205
        from quack.gemm_interface import gemm, gemm_dgated

        preact, down = ctx.saved_tensors
        rows = as_rows(dout)
        dpreact, h = gemm_dgated(rows, down, preact.flatten(0, -2), activation="swiglu",
                                 dynamic_scheduler=True)
        ddown = gemm(rows.T, h, out_dtype=down.dtype, dynamic_scheduler=True)
        return dpreact.view(preact.shape), ddown, None, dout if ctx.with_residual else None


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """`t` as a matrix of rows [*, d] whose last dimension is contiguous, as quack's GEMMs take an
    operand (a gradient may arrive with another stride)."""
    rows = t.flatten(0, -2)
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def load_quack() -> None:
    """Import quack once, keying the objects it cannot key itself.

    quack caches each compiled GEMM epilogue under a key built from everything the epilogue's
    code refers to, and refuses an object it has no key for. With nvidia-cutlass-dsl 4.8 that code
    reaches a ContextVar and code-object methods of the DSL. These are the DSL's own machinery, the
    same for every epilogue, so a key by their type is enough; any other object still raises.
    """
    import quack.gemm_runtime.identity as identity

    if getattr(identity.semantic_value_key, "trainperf_keyed", False):
        return
    own = identity.semantic_value_key

    def semantic_value_key(value, seen):  # noqa: ANN001, ANN202
        if isinstance(value, contextvars.ContextVar):
            return ("contextvar", value.name)
        try:
            return own(value, seen)
        except TypeError:
            kind = type(value).__module__
            if kind != "builtins" and not kind.startswith("cutlass"):
                raise
            return ("by-type", kind, type(value).__qualname__)

    semantic_value_key.trainperf_keyed = True
    identity.semantic_value_key = semantic_value_key

