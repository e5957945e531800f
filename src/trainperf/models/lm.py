"""A readable GPT-style LM: RMSNorm pre-norm blocks, RoPE, causal attention, SwiGLU, untied head.

Module names match the profiling ranges (`layers.N.attn.qkv_proj` → `fwd.layer.attn.qkv_proj`),
and attention and normalisation are chosen by name from their registries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from trainperf.attention.registry import NAMES as ATTENTION_NAMES
from trainperf.attention.registry import get_attention
from trainperf.kernels.rope_reference import rope_reference
from trainperf.models.norms import NORMS, make_norm

if TYPE_CHECKING:  # the float8 kernels import Triton, an optional extra
    from trainperf.kernels.float8_mlp import ScaleState

IMPLS = ("torch", "triton")  # implementations of RoPE and of the SwiGLU activation


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int = 10_000
    context_length: int = 1024
    d_model: int = 768
    d_ff: int = 3072
    n_layers: int = 12
    n_heads: int = 12
    rope_theta: float = 10_000.0
    attention: str = "sdpa"
    norm: str = "torch"
    rope: str = "torch"  # torch | triton
    swiglu: str = "torch"  # torch | triton

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "d_model", "d_ff", "n_layers", "n_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head dim {self.d_model // self.n_heads} must be even for RoPE")
        if self.attention not in ATTENTION_NAMES:
            raise ValueError(f"unknown attention {self.attention!r}; valid choices: "
                             f"{', '.join(ATTENTION_NAMES)}")
        if self.norm not in NORMS:
            raise ValueError(f"unknown norm {self.norm!r}; valid choices: {', '.join(NORMS)}")
        for name in ("rope", "swiglu"):
            if getattr(self, name) not in IMPLS:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid choices: {', '.join(IMPLS)}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def layer_matmul_params(self) -> int:
        """A decoder layer's parameters in matrix products: q, k, v, o and the SwiGLU's three."""
        return 4 * self.d_model**2 + 3 * self.d_model * self.d_ff


class Rope(nn.Module):
    """Rotary position embedding (rotate-half form) applied to q and k."""

    def __init__(self, head_dim: int, context_length: int, theta: float, impl: str = "torch") -> None:
        super().__init__()
        self.impl = impl
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(context_length, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[-2]
        return rope_reference(x, self.cos[:seq], self.sin[:seq])

    def tables(self, seq: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [1, seq, head_dim] with repeated halves, in `dtype` as `_rotate` rounds them:
        the form the float8 q, k and v product rotates with (kernels/float8_linear.py)."""
        return tuple(torch.cat([t[:seq], t[:seq]], dim=-1).to(dtype)[None] for t in (self.cos, self.sin))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.impl == "triton":
            from trainperf.kernels import require_triton

            require_triton(q.device, "--rope triton")
            from trainperf.kernels.rope import rope_triton
            return rope_triton(q, self.cos, self.sin), rope_triton(k, self.cos, self.sin)
        return self._rotate(q), self._rotate(k)


class AttentionOp(nn.Module):
    """The attention kernel itself, as a module so it gets its own profiling range."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self._fn = None

    def bind(self, device: torch.device) -> None:
        """Pick the implementation for `device` now. Left to the first forward inside a compiled
        region, the `_fn is None` check is a guard that recompiles the region on its second call."""
        self._fn = get_attention(self.name, device)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self._fn is None:
            self.bind(q.device)
        return self._fn(q, k, v, causal=True)


class SelfAttention(nn.Module):
    """Pre-norm causal multi-head self-attention sublayer (returns the residual update)."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.prenorm = make_norm(cfg.norm, cfg.d_model)
        self.qkv_proj = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.rope = Rope(cfg.head_dim, cfg.context_length, cfg.rope_theta, cfg.rope)
        self.sdpa = AttentionOp(cfg.attention)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.float8 = None  # the scale states of qkv and o on float8 GEMMs (float8_blocks)
        self.rope_in_product = False  # RoPE inside the float8 qkv product (float8_blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        float8 = self.float8 or (None, None)
        if self.rope_in_product:
            from trainperf.kernels.float8_linear import float8_qkv_rope

            q, k, v = (y.transpose(1, 2) for y in float8_qkv_rope(
                self.prenorm(x), self.qkv_proj.weight, *self.rope.tables(t, x.dtype), float8[0],
                (self.n_heads,) * 3))
        else:
            qkv = _product(self.qkv_proj, self.prenorm(x), float8[0])
            q, k, v = qkv.view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4).unbind(0)
            q, k = self.rope(q, k)
        y = self.sdpa(q, k, v)  # q, k, v: [b, heads, t, head_dim]
        return _product(self.o_proj, y.transpose(1, 2).reshape(b, t, d), float8[1])


class FeedForward(nn.Module):
    """Pre-norm SwiGLU feed-forward sublayer: down(silu(gate(x)) · up(x))."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.prenorm = make_norm(cfg.norm, cfg.d_model)
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
        self.swiglu = cfg.swiglu
        self.float8 = None  # the scale state of the whole SwiGLU on float8 GEMMs (float8_blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.prenorm(x)
        if self.float8 is not None:
            from trainperf.kernels.float8_mlp import float8_mlp

            gate_up = torch.cat([self.gate_proj.weight, self.up_proj.weight])
            return float8_mlp(h, gate_up, self.down_proj.weight, self.float8)
        gate, up = self.gate_proj(h), self.up_proj(h)
        if self.swiglu == "triton":
            from trainperf.kernels import require_triton

            require_triton(x.device, "--swiglu triton")
            from trainperf.kernels.swiglu import swiglu_triton
            return self.down_proj(swiglu_triton(gate, up))
        return self.down_proj(F.silu(gate) * up)


def _product(linear: nn.Linear, x: torch.Tensor, float8: ScaleState | None) -> torch.Tensor:
    """linear(x), on float8 GEMMs where `float8` is the Linear's scale state."""
    if float8 is None:
        return linear(x)
    from trainperf.kernels.float8_linear import float8_linear

    return float8_linear(x, linear.weight, float8)


def float8_blocks(model: nn.Module) -> None:
    """Put every decoder block's matrix products on trainperf's float8 GEMMs with delayed scaling
    (`shard --float8 trainperf`; kernels/float8_linear.py and float8_mlp.py say how): q, k and v as
    one product (`qkv_proj` stacks them), o another, and the SwiGLU MLP with gate and up stacked,
    as the Llama step's `--float8 trainperf-all` has them, RoPE inside the q, k and v product where
    its kernels take the heads. The weights stay the Linears' own, so sharding and the optimizer see
    the same parameters; the LM head stays in bf16."""
    from trainperf.kernels import require_float8_gemms

    device = next(model.parameters()).device
    require_float8_gemms(device, "--float8 trainperf")
    from trainperf.kernels.float8_linear import linear_state, rope_grad_cast_takes
    from trainperf.kernels.float8_mlp import ScaleState, check_dims

    for m in model.modules():
        if isinstance(m, SelfAttention):
            check_dims(*m.qkv_proj.weight.shape, *m.o_proj.weight.shape)
            m.float8 = (linear_state(m.qkv_proj.weight), linear_state(m.o_proj.weight))
            m.rope_in_product = rope_grad_cast_takes(m.qkv_proj.in_features // m.n_heads)
        elif isinstance(m, FeedForward):
            check_dims(*m.down_proj.weight.shape)
            m.float8 = ScaleState(device)


class Block(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.mlp = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


class TransformerLM(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.output_norm = make_norm(cfg.norm, cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)

    def bind_attention(self, device: torch.device) -> None:
        """Pick every layer's attention implementation for `device` (before torch.compile)."""
        for module in self.modules():
            if isinstance(module, AttentionOp):
                module.bind(device)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """The final normalised hidden states (what the LM head multiplies)."""
        if tokens.shape[-1] > self.cfg.context_length:
            raise ValueError(f"sequence {tokens.shape[-1]} > context {self.cfg.context_length}")
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output_norm(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.hidden(tokens))

    def compile_layers(self) -> None:
        """Compile each decoder layer on its own: its backward stays an autograd node of its own, so
        gradient hooks and FSDP2 still see each layer's gradients arrive as its backward ends.
        Dynamo's caches are emptied first: every model of a process shares the layers' code objects,
        so a sweep's later cases would otherwise recompile against the earlier cases' guards, with
        shapes made dynamic or, past the recompile limit, run eagerly."""
        torch._dynamo.reset()
        for layer in self.layers:
            layer.compile()

    def matmul_params(self) -> int:
        """Parameters inside matrix multiplies (what the 2·N·tokens FLOP term counts)."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy in float32."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
