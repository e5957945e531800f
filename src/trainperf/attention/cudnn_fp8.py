"""Attention on cuDNN's float8 SDPA graphs, forward and backward, for Hopper and newer GPUs
(`cudnn-fp8`): bf16 in and out, float8 inside.

Q, K and V (and in the backward dO) are cast to float8 with the scale of their own amax (a power of
two: exact to apply in bf16, so each cast rounds once and reads and writes no float32). P and O
take scales from bounds known before the kernel runs: P is at most 1, |O| at most V's amax (each
row of O is a convex combination of V's rows). dP (the scores' gradient P∘(dO·Vᵀ − D)) is bounded
by the longest row of dO times the longest row of V, but at long sequences P's entries are small
and dP's amax is far below that bound (0.003 of it at 32,768 tokens, which leaves e4m3 a few
bits), and the gradients have no useful bound at all (a key's gradient sums over every query that
attends to it). So the backward takes `delayed` scales for them: those of the amaxes cuDNN measured
on earlier calls, as Transformer Engine's delayed scaling carries them (`AmaxHistory`).

cuDNN 9.19 builds float8 graphs on Hopper only with float8 O and gradients and head dimension 128
(`benchmarks/results/float8/h200-2026-12-02c/`). The ops keep attention/op_autograd.py's
contract: O and the gradients leave them in bf16 (exactly, as every scale is a power of two), a
step saves q, k, v and O in bf16 as with bf16 attention, and the backward casts them again, a pass
over each, small beside attention at long sequences. `benchmarks/probes/cudnn_fp8_attention.py`
sets each choice of types beside cuDNN's bf16 graphs and FlashAttention 4.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainperf.attention.cudnn_fe import fake_forward
from trainperf.attention.op_autograd import register_attention_autograd
from trainperf.core.errors import Unsupported
from trainperf.kernels import cudnn_graphs as cg

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FORWARD_OUT = ("o", "stats", "amax_s", "amax_o")
BACKWARD_OUT = ("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp")
FORWARD_SCALARS = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
# the backward's scale arguments, by the name of the buffer each takes
BACKWARD_SCALARS = {"descale_q": "descale_q", "descale_k": "descale_k", "descale_v": "descale_v",
                    "descale_o": "descale_o", "descale_dO": "descale_do", "descale_s": "descale_s",
                    "descale_dP": "descale_dp", "scale_s": "scale_s", "scale_dQ": "scale_dq",
                    "scale_dK": "scale_dk", "scale_dV": "scale_dv", "scale_dP": "scale_dp"}
UID = {name: uid for uid, name in enumerate(
    ("q", "k", "v", "do", *FORWARD_OUT, *BACKWARD_OUT, "descale_o", "descale_do", "descale_dp",
     *FORWARD_SCALARS, "scale_dq", "scale_dk", "scale_dv", "scale_dp"), 1)}


@dataclass(frozen=True)
class Float8Types:
    """The types of O, of dO (and with it dP) and of dQ, dK and dV; Q, K and V are e4m3. All e4m3
    by default: on Hopper the only choice cuDNN builds beside e5m2 dO and gradients, and with
    delayed scales the more accurate one."""

    o: torch.dtype = E4M3
    do: torch.dtype = E4M3
    grads: torch.dtype = E4M3


def is_float8(dtype: torch.dtype) -> bool:
    return dtype in (E4M3, E5M2)


def power_of_two_scale(bound: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The largest power of two that keeps values of at most `bound` within `dtype`'s range: a
    scale that multiplies exactly, in the input's own precision, so a cast rounds once and needs
    no float32 copy, and whose descale is exact too (at most one binade of range left unused)."""
    return torch.exp2(torch.floor(torch.log2(torch.finfo(dtype).max / bound.float().clamp(min=1e-30))))


def cast(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`t` in `dtype`, scaled by its own amax (same strides), and the descale that undoes it."""
    scale = power_of_two_scale(t.abs().amax(), dtype)
    return (t * scale.to(t.dtype)).to(dtype), (1 / scale).reshape(1, 1, 1, 1)


def _fused_on_gpu(fn: Callable) -> Callable:
    """`fn`, compiled where its first argument is on a GPU: its passes over a tensor (amax, scale,
    convert) become one or two kernels instead of four PyTorch ops."""
    compiled = torch.compile(fn, dynamic=False, fullgraph=True)
    return lambda t, *args: (compiled if t.is_cuda else fn)(t, *args)


fused_cast = _fused_on_gpu(cast)


def bound_scales(bound: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The scale and descale of a float8 tensor whose values are at most `bound` (ones where the
    tensor is not float8: cuDNN then leaves them unused)."""
    if not is_float8(dtype):
        return _scalar(bound.device), _scalar(bound.device)
    scale = power_of_two_scale(bound, dtype).reshape(1, 1, 1, 1)
    return scale, 1 / scale


def dp_bound(do: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The largest |dP| can be: the longest row of dO times the longest row of V."""
    return do.float().norm(dim=-1).amax() * v.float().norm(dim=-1).amax()


def delayed_scales(amaxes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The scales of dQ, dK and dV for `dtype` from their amaxes on a previous call (ones where
    `dtype` is not float8); the descales are their inverses."""
    if not is_float8(dtype):
        return torch.ones(3, device=amaxes.device)
    return power_of_two_scale(amaxes[:3], dtype)


def _scalar(device: torch.device, value: float = 1.0) -> torch.Tensor:
    return torch.full((1, 1, 1, 1), value, dtype=torch.float32, device=device)


def _finish(out: Any, name: str, like: torch.Tensor) -> None:
    out.set_uid(UID[name]).set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride()))
    out.set_data_type(cg.io_type(like.dtype))


def _declare_all(g: Any, buffers: dict[str, torch.Tensor], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: cg.declare(g, UID[name], name, buffers[name]) for name in names}


def _mask(causal: bool) -> dict[str, Any]:
    import cudnn

    return {"diagonal_alignment": cudnn.diagonal_alignment.TOP_LEFT, "right_bound": 0} if causal else {}


def _forward_graph(buffers: dict[str, torch.Tensor], causal: bool, scale: float) -> Any:
    g = cg.new_graph(buffers["q"].device, E4M3)
    t = _declare_all(g, buffers, ("q", "k", "v", *FORWARD_SCALARS))
    outs = g.sdpa_fp8(**t, generate_stats=True, attn_scale=scale, name="sdpa_fp8", **_mask(causal))
    for name, out in zip(FORWARD_OUT, outs, strict=True):
        if name != "amax_s":  # left virtual, as cuDNN asks: P's scale comes from its bound
            _finish(out, name, buffers[name])
    return g


def _backward_graph(buffers: dict[str, torch.Tensor], causal: bool, scale: float) -> Any:
    g = cg.new_graph(buffers["q"].device, E4M3)
    t = _declare_all(g, buffers, ("q", "k", "v", "o", "stats", "do", *BACKWARD_SCALARS.values()))
    t["dO"] = t.pop("do")
    args = {arg: t.pop(name) for arg, name in BACKWARD_SCALARS.items()}
    outs = g.sdpa_fp8_backward(**t, **args, attn_scale=scale, name="sdpa_fp8_bwd", **_mask(causal))
    for name, out in zip(BACKWARD_OUT, outs, strict=True):
        _finish(out, name, buffers[name])
    return g


def _run(kind: str, build: Any, buffers: dict[str, torch.Tensor], causal: bool, scale: float) -> None:
    key = (kind, *(cg.layout(t) for t in buffers.values()), causal, scale, buffers["q"].device)
    graph = cg.cached_graph(key, lambda: build(buffers, causal, scale))
    cg.execute(graph, {UID[name]: t for name, t in buffers.items()}, buffers["q"].device)


def _inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, torch.Tensor]:
    """What both graphs take first: Q, K and V in e4m3 with their descales, and P's scales."""
    buffers: dict[str, torch.Tensor] = {}
    for name, t in (("q", q), ("k", k), ("v", v)):
        buffers[name], buffers[f"descale_{name}"] = fused_cast(t, E4M3)
    buffers["scale_s"], buffers["descale_s"] = bound_scales(torch.ones((), device=q.device), E4M3)
    return buffers


def float8_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                   types: Float8Types = Float8Types()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """O in `types.o` (laid out [batch, seq, heads, dim] under a [batch, heads, seq, dim] view), the
    softmax's log-sum-exp per query row, and O's descale (one where O is not float8)."""
    b, h, n, _ = q.shape
    buffers = _inputs(q, k, v)
    buffers["scale_o"], descale_o = bound_scales(v.abs().amax(), types.o)
    buffers["o"] = q.new_empty(b, n, h, v.shape[-1], dtype=types.o).transpose(1, 2)
    buffers["stats"] = q.new_empty(b, h, n, 1, dtype=torch.float32)
    buffers["amax_o"] = _scalar(q.device)
    _run("sdpa_fp8", _forward_graph, buffers, causal, scale)
    return buffers["o"], buffers["stats"], descale_o


def float8_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                    descale_o: torch.Tensor, stats: torch.Tensor, causal: bool, scale: float,
                    types: Float8Types = Float8Types(), delayed: torch.Tensor | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK and dV in `types.grads`, their three descales, and the amaxes of dQ, dK, dV and dP as
    cuDNN measured them. `o` is the forward's, in `types.o`. `delayed` holds amaxes in that order
    from earlier calls: float8 gradients are then scaled by `delayed_scales` of them and dP by its
    own; without it the gradients are unscaled and dP is scaled by its bound."""
    buffers = {**_inputs(q, k, v), "o": o, "stats": stats, "descale_o": descale_o}
    buffers["do"], buffers["descale_do"] = fused_cast(do, types.do)
    dp_amax = dp_bound(do, v) if delayed is None else delayed[3]
    buffers["scale_dp"], buffers["descale_dp"] = bound_scales(dp_amax, types.do)
    scales = torch.ones(3, device=q.device) if delayed is None else delayed_scales(delayed, types.grads)
    for i, (name, like) in enumerate((("dq", q), ("dk", k), ("dv", v))):
        buffers[name] = torch.empty_strided(like.shape, like.stride(), dtype=types.grads, device=q.device)
        buffers[f"scale_{name}"] = _scalar(q.device).copy_(scales[i])  # a buffer of its own, aligned
    for name in BACKWARD_OUT[3:]:
        buffers[name] = _scalar(q.device)
    _run("sdpa_fp8_bwd", _backward_graph, buffers, causal, scale)
    amaxes = torch.cat([buffers[name].reshape(1) for name in BACKWARD_OUT[3:]])
    return buffers["dq"], buffers["dk"], buffers["dv"], 1 / scales, amaxes


@dataclass
class AmaxHistory:
    """The amaxes of dQ, dK, dV and dP over the last `calls` backward calls at one shape (every
    layer of a model shares it), as Transformer Engine's delayed scaling keeps them: a call scales
    by the largest with `margin` of headroom. Kept on the GPU and updated there, so nothing waits on
    the host and a captured CUDA graph replays it."""

    amaxes: torch.Tensor  # [calls, 4], newest first
    margin: float = 2.0

    def delayed(self) -> torch.Tensor:
        return self.amaxes.amax(0) * self.margin

    def record(self, amaxes: torch.Tensor) -> None:
        self.amaxes.copy_(torch.cat([amaxes.reshape(1, 4), self.amaxes[:-1]]))


HISTORY_CALLS = 256
_HISTORIES: dict[tuple, AmaxHistory] = {}


def _history(key: tuple, first_amaxes: Callable[[], torch.Tensor]) -> AmaxHistory:
    """The history at `key`, started from a first backward's amaxes where there is none yet."""
    if key not in _HISTORIES:
        _HISTORIES[key] = AmaxHistory(first_amaxes().reshape(1, 4).repeat(HISTORY_CALLS, 1))
    return _HISTORIES[key]


def exact_bf16(t: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    """A float8 tensor in bf16, descaled: exact, as float8 values times a power of two are bf16."""
    return t.to(torch.bfloat16) * descale.to(torch.bfloat16)


_fused_bf16 = _fused_on_gpu(exact_bf16)


def recast_output(o: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward's float8 O again from its bf16 copy, with the forward's scale: exactly."""
    scale_o, descale_o = bound_scales(v.abs().amax(), E4M3)
    return (o * scale_o.to(o.dtype)).to(E4M3), descale_o


_fused_recast = _fused_on_gpu(recast_output)


@torch.library.custom_op("trainperf::cudnn_fp8_sdpa", mutates_args=())
def cudnn_fp8_sdpa_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                      scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output (bf16) and the softmax's log-sum-exp per query row, on float8 graphs."""
    o, stats, descale_o = float8_forward(q, k, v, causal, scale, Float8Types())
    return _fused_bf16(o, descale_o), stats


cudnn_fp8_sdpa_op.register_fake(fake_forward)


@torch.library.custom_op("trainperf::cudnn_fp8_sdpa_backward", mutates_args=())
def cudnn_fp8_sdpa_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               o: torch.Tensor, stats: torch.Tensor, causal: bool,
                               scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (bf16) on float8 graphs, from the forward's output and statistics; dP and the
    gradients scaled by the amax history of this shape."""
    o8, descale_o = _fused_recast(o, v)

    def backward(delayed: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        return float8_backward(do, q, k, v, o8, descale_o, stats, causal, scale, Float8Types(), delayed)

    history = _history((q.shape, k.shape, causal, q.device), lambda: backward(None)[-1])
    *grads, descales, amaxes = backward(history.delayed())
    history.record(amaxes)
    return tuple(_fused_bf16(g, descales[i]) for i, g in enumerate(grads))


register_attention_autograd(cudnn_fp8_sdpa_op, cudnn_fp8_sdpa_backward_op)


def require_float8_attention(device: torch.device, what: str = "cudnn-fp8") -> None:
    """Unsupported (naming the install command, or the GPU it needs) unless it runs here."""
    cg.require_cudnn(device, what)
    if torch.cuda.get_device_capability(device) < (9, 0):
        raise Unsupported(f"{what} needs a Hopper or newer GPU (cuDNN's float8 attention)")


def cudnn_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                        scale: float | None = None) -> torch.Tensor:
    """Attention of bf16 q [batch, heads, seq, dim] over k, v [batch, kv_heads, seq, dim] on
    cuDNN's float8 graphs; bf16 out, bf16 gradients."""
    require_float8_attention(q.device)
    if q.dtype != torch.bfloat16:
        raise Unsupported(f"cudnn-fp8 takes bf16, not {q.dtype}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads {q.shape[1]} are not a multiple of K/V heads {k.shape[1]}")
    if q.shape[-1] != 128 and torch.cuda.get_device_capability(q.device)[0] == 9:
        raise Unsupported(f"cudnn-fp8 on Hopper takes heads of dimension 128, not {q.shape[-1]} "
                          "(cuDNN's float8 attention backward)")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return cudnn_fp8_sdpa_op(q, k, v, causal, scale)[0]
