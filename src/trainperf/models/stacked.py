"""Stacked projections in a transformers Llama (`--proj stacked`, and quack's MLP).

The query, key and value projections of an attention layer read the same input, and so do the
gate and up projections of an MLP. Stacked into one weight, each group is one GEMM: a wider one,
where the key and value projections alone (512 columns in Llama-3.2-1B) are narrow; in the
backward, one GEMM gives the input's gradient, where three GEMMs and two additions did. A float8
recipe casts the shared input once instead of once per projection. Every output column is
computed as before; only the order in which the input gradient is summed changes.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from trainperf.core.errors import Unsupported

# separate (transformers' own projections) | stacked (one weight per group of projections)
PROJ_MODES = ("separate", "stacked")


def check_proj(proj: str, swiglu: str, library: str = "none") -> None:
    """ValueError where stacked projections cannot go with the other choices: trainperf's Triton
    SwiGLU and a kernel library's patches take transformers' separate projections (quack's MLP
    stacks gate and up itself)."""
    if proj != "stacked":
        return
    if swiglu == "triton":
        raise ValueError("--proj stacked stacks the gate and up projections, which --swiglu triton "
                         "runs apart: take --swiglu torch or quack")
    if library != "none":
        raise ValueError(f"--library {library} patches transformers' separate projections: "
                         "leave --proj at separate")


def stacked_linear(linears: list[torch.nn.Linear]) -> torch.nn.Linear:
    """One bias-free Linear whose weight is `linears`' weights stacked, in their order."""
    if any(linear.bias is not None for linear in linears):
        raise Unsupported("stacked projections take Linear layers without biases")
    first = linears[0].weight
    stacked = torch.nn.Linear(first.shape[1], sum(linear.out_features for linear in linears), bias=False,
                              device=first.device, dtype=first.dtype)
    with torch.no_grad():
        stacked.weight.copy_(torch.cat([linear.weight for linear in linears]))
    return stacked


class StackedMLP(torch.nn.Module):
    """A Llama MLP whose gate and up projections are one Linear, `gate_up` (weights [gate; up]).
    With `quack`, a CUDA input takes quack's GEMMs with the SwiGLU in their epilogues
    (kernels/quack_mlp.py); otherwise, and off the GPU, PyTorch computes it."""

    def __init__(self, mlp: torch.nn.Module, quack: bool = False) -> None:
        super().__init__()
        if mlp.down_proj.bias is not None:
            raise Unsupported("stacked projections take an MLP without biases")
        self.gate_up = stacked_linear([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj
        self.quack = quack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quack and x.is_cuda:
            from trainperf.kernels.quack_mlp import quack_mlp

            return quack_mlp(x, self.gate_up.weight, self.down_proj.weight)
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def llama_mlps(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The (name, module) of each gated Llama MLP in `model`."""
    return [(name, m) for name, m in model.named_modules()
            if type(m).__name__.endswith("MLP") and hasattr(m, "gate_proj")]


def stack_mlps(model: torch.nn.Module, quack: bool = False) -> None:
    """Replace every gated Llama MLP of `model` by a StackedMLP holding the same weights."""
    for name, module in llama_mlps(model):
        replace_module(model, name, StackedMLP(module, quack))


def stack_attention(model: torch.nn.Module) -> None:
    """Give every Llama attention layer of `model` one `qkv_proj` in place of q_proj, k_proj and
    v_proj, and a forward that splits its output."""
    for _, module in list(model.named_modules()):
        if all(hasattr(module, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
            parts = [module.q_proj, module.k_proj, module.v_proj]
            module.qkv_sizes = [p.out_features for p in parts]
            module.qkv_proj = stacked_linear(parts)
            del module.q_proj, module.k_proj, module.v_proj
            module.forward = types.MethodType(_stacked_attention_forward, module)


def _stacked_attention_forward(self, hidden_states: torch.Tensor,  # noqa: ANN001
                               position_embeddings: tuple[torch.Tensor, torch.Tensor],
                               attention_mask: torch.Tensor | None = None, past_key_values: object = None,
                               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' LlamaAttention.forward for training, with the three projections as one GEMM.
    RoPE and the attention are looked up in transformers at call time, as its own forward does, so
    trainperf's RoPE dispatch and attention registrations apply."""
    from transformers.models.llama import modeling_llama

    if past_key_values is not None:
        raise Unsupported("stacked projections are for training: they take no KV cache")
    tokens = hidden_states.shape[:-1]
    q, k, v = (t.view(*tokens, -1, self.head_dim).transpose(1, 2)
               for t in self.qkv_proj(hidden_states).split(self.qkv_sizes, dim=-1))
    q, k = modeling_llama.apply_rotary_pos_emb(q, k, *position_embeddings)
    attention = modeling_llama.ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
    out, weights = attention(self, q, k, v, attention_mask, scaling=self.scaling,
                             dropout=self.attention_dropout if self.training else 0.0, **kwargs)
    return self.o_proj(out.reshape(*tokens, -1).contiguous()), weights


def replace_module(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    """Put `module` where the submodule `name` of `model` is."""
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)
