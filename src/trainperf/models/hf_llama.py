"""Random-init Hugging Face Llama models from a local config, with SDPA pinned to one backend.

No token and no network: configs ship with trainperf (`llama-3.2-1b`, `llama-3.1-8b`, `tiny`);
`--model` also takes a local config.json or model folder, and a hub id is only used when the user
names one.

Attention goes through trainperf's own entry in transformers' AttentionInterface: it calls
transformers' SDPA path inside `sdpa_kernel(backend)`, so the chosen backend runs or raises —
never a silent fallback. Backends that reject grouped-query attention get K/V heads expanded
(`repeat_kv`) first; the workload records which of the two it used.

trainperf's own backends (OWN_BACKENDS) are causal attention without padding, and trainperf's
inputs never pad, so no mask function is registered for them: transformers then builds no mask
and never reads the 2D padding mask. For PyTorch's backends it reads it on the host
(`padding_mask.all()` in its check for a causal skip), a device-to-host sync in every forward that
keeps the host from queueing the forward while the GPU still runs the last backward. A model
compiled whole gets PyTorch's backends without a mask function too (`attention_name(...,
reads_mask=False)`): under `torch.compile` transformers cannot read the mask's values (nor, without
a mask, the position ids' for packed sequences), so it builds the [seq, seq] mask, and SDPA then
computes every tile through it instead of skipping the masked half as its causal mode does.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import types
from collections.abc import Callable
from pathlib import Path

import torch

from trainperf.core.errors import MissingPackage, Unsupported
from trainperf.models.lm import IMPLS
from trainperf.models.norms import NORMS
from trainperf.profiling.ranges import in_sub_range

CONFIG_DIR = Path(__file__).parent / "configs"
PRESETS = {"llama-3.2-1b": CONFIG_DIR / "llama-3.2-1b.json", "llama-3.1-8b": CONFIG_DIR / "llama-3.1-8b.json",
           "tiny": CONFIG_DIR / "llama-tiny.json",
           # other families at real size, their configs as published (no weights): `--model hf:NAME`
           "qwen2.5-1.5b": CONFIG_DIR / "qwen2.5-1.5b.json", "qwen2.5-7b": CONFIG_DIR / "qwen2.5-7b.json",
           "gemma-2-2b": CONFIG_DIR / "gemma-2-2b.json"}
BACKENDS = ("CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "FLASH_ATTENTION", "MATH", "CUDNN_FE", "CUDNN_FP8",
            "FA4")
# Beside PyTorch's SDPA backends, attention that trainperf calls directly: CUDNN_FE is the cuDNN
# frontend's SDPA graphs without PyTorch's dispatch (attention/cudnn_fe.py), CUDNN_FP8 its float8
# graphs (attention/cudnn_fp8.py), FA4 FlashAttention 4's kernels (attention/fa4.py).
OWN_BACKENDS = {"CUDNN_FE": "cudnn-fe", "CUDNN_FP8": "cudnn-fp8", "FA4": "fa4"}
# The aten op that each backend dispatches to; what the profiler shows when it really ran.
BACKEND_OPS = {
    "CUDNN_ATTENTION": "aten::_scaled_dot_product_cudnn_attention",
    "EFFICIENT_ATTENTION": "aten::_scaled_dot_product_efficient_attention",
    "FLASH_ATTENTION": "aten::_scaled_dot_product_flash_attention",
    "MATH": "aten::_scaled_dot_product_attention_math",
    "CUDNN_FE": "trainperf::cudnn_sdpa",
    "CUDNN_FP8": "trainperf::cudnn_fp8_sdpa",
    "FA4": "trainperf::fa4_attention",
}
PACKED_OP = "trainperf::fa4_packed_attention"  # FA4 with --kv-heads packed (attention/fa4_packed.py)


def attention_op(backend: str, kv_heads: str) -> str:
    """The op the profiler shows when `backend` really ran with K/V heads `kv_heads`."""
    return PACKED_OP if kv_heads == "packed" else BACKEND_OPS[backend]


def load_config(model: str = "llama-3.2-1b", layers: int | None = None):
    """A LlamaConfig (or any causal-LM config) from `--model`: a preset, a local config.json or
    model folder, or a hub id (the network, only because the user named one). The name and
    --layers are checked before transformers is imported, so bad input is answered as such on an
    install without it."""
    if not model.strip():
        raise ValueError("--model needs a preset, a config.json or model folder, or a hub id")
    if model.startswith("py:"):
        raise ValueError(f"--model {model!r}: this command swaps parts of a transformers Llama; your own "
                         "nn.Module goes through step, profile, memory, shard, ddp and parity")
    model = model.removeprefix("hf:")
    hub_id = re.fullmatch(r"[\w.-]+/[\w.-]+", model) and not model.endswith(".json")
    if model not in PRESETS and not Path(model).exists() and not hub_id:
        raise ValueError(f"unknown --model {model!r}: not a preset ({', '.join(PRESETS)}), an existing "
                         "config.json or model folder, or a hub id (org/name)")
    if layers is not None and layers < 1:
        raise ValueError(f"--layers must be at least 1, got {layers}")
    auto_config = transformers_module().AutoConfig
    if model in PRESETS:
        cfg = _from_json(PRESETS[model])
    elif Path(model).exists():
        path = Path(model)
        cfg = _from_json(path) if path.is_file() else auto_config.from_pretrained(path)
    else:
        cfg = hub_config(model)
    if layers is not None:
        if layers > cfg.num_hidden_layers:
            raise ValueError(f"--layers must be between 1 and the model's {cfg.num_hidden_layers}, "
                             f"got {layers}")
        cfg.num_hidden_layers = layers
    cfg.use_cache = False
    return cfg


def transformers_module() -> types.ModuleType:
    """transformers, or MissingPackage naming the install command."""
    try:
        import transformers
    except ImportError:
        raise MissingPackage("the Llama workloads need transformers, which this install lacks: "
                             "pip install 'trainperf[hf]'") from None
    return transformers


HUB = ("huggingface.co", 443)


def hub_config(model_id: str):
    """A hub model's config: from the local cache, else from the hub; without network a one-line
    error at once instead of minutes of retries."""
    auto_config = transformers_module().AutoConfig
    try:
        return auto_config.from_pretrained(model_id, local_files_only=True)
    except OSError:
        pass
    how = "pass a local config.json or model folder to --model, or a preset"
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        raise ValueError(f"--model {model_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE "
                         f"is set; {how}")
    try:
        socket.create_connection(HUB, timeout=2).close()
    except OSError:
        raise ValueError(f"--model {model_id!r} could not be fetched: not in the local Hugging Face cache "
                         f"and the hub cannot be reached (offline?); {how}") from None
    return auto_config.from_pretrained(model_id)


def _from_json(path: Path):
    """A transformers config from one JSON file of any name."""
    data = json.loads(path.read_text())
    if "model_type" not in data:
        raise ValueError(f"{path} has no 'model_type'; is it a transformers config.json?")
    return transformers_module().AutoConfig.for_model(data.pop("model_type"), **data)


def attention_name(backend: str, expand_kv: bool, reads_mask: bool = True) -> str:
    """Register (once) and return the transformers attention name for this backend and KV mode.
    With `reads_mask` off, PyTorch's backends get no mask from transformers: causal attention,
    inputs assumed unpadded, as for trainperf's own backends."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    own = backend in OWN_BACKENDS
    causal = "" if reads_mask or own else "_causal"
    name = f"trainperf_{backend.lower()}_{'expanded' if expand_kv else 'native'}{causal}"

    def pinned(module, query, key, value, attention_mask, **kwargs):  # noqa: ANN001, ANN202
        if getattr(module, "trainperf_packed_heads", False):
            return _packed_attention(backend, query, key, value, attention_mask, **kwargs)
        groups = getattr(module, "num_key_value_groups", 1)
        if expand_kv and groups > 1:
            key, value = repeat_kv(key, groups), repeat_kv(value, groups)
        if own:
            return _own_attention(OWN_BACKENDS[backend], query, key, value, attention_mask, **kwargs)
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    def attention(module, *args, **kwargs):  # noqa: ANN001, ANN202
        # its profiling range: the study's name for grouped-query attention, else trainperf LM's
        leaf = "gqa" if getattr(module, "num_key_value_groups", 1) > 1 else "sdpa"
        return in_sub_range(leaf, pinned, module, *args, **kwargs)

    AttentionInterface.register(name, attention)
    if reads_mask and not own:
        AttentionMaskInterface.register(name, sdpa_mask)
    return name


def _own_attention(impl: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                   **_: object) -> tuple[torch.Tensor, None]:
    """transformers' attention contract (output [batch, seq, heads, dim]) over one of trainperf's
    causal attention implementations, which take no padding mask and no dropout."""
    _check_causal_only(impl, attention_mask, dropout)
    out = _attention_for(impl, query.device)(query, key, value, causal=query.shape[2] > 1, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def _packed_attention(backend: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      **_: object) -> tuple[torch.Tensor, None]:
    """A layer whose query heads pack_query_heads reordered: FA4's packed attention, the only one
    that reads that order."""
    from trainperf.attention.fa4_packed import fa4_packed_attention

    if backend != "FA4":
        raise Unsupported(f"--kv-heads packed runs on FlashAttention 4 (FA4), not {backend}")
    _check_causal_only("--kv-heads packed", attention_mask, dropout)
    return fa4_packed_attention(query, key, value, scale=scaling).transpose(1, 2).contiguous(), None


def _check_causal_only(what: str, attention_mask: torch.Tensor | None, dropout: float) -> None:
    """Unsupported unless transformers asks trainperf's own attention for what it computes:
    causal attention, no padding mask, no dropout."""
    if attention_mask is not None or dropout:
        raise Unsupported(f"{what} takes causal attention without a padding mask or dropout")


def pack_query_heads(model: torch.nn.Module) -> None:
    """Reorder every attention layer's query heads so that head j·G + g uses K/V head g (G K/V
    heads; transformers' order is g·R + j, R query heads each), by permuting q_proj's rows and
    o_proj's columns: the same function, in the order attention/fa4_packed.py packs."""
    for module in model.modules():
        if not all(hasattr(module, a) for a in ("q_proj", "o_proj", "num_key_value_groups", "head_dim")):
            continue
        per_kv, dim = module.num_key_value_groups, module.head_dim
        heads = module.q_proj.out_features // dim
        kv_heads = heads // per_kv
        # new head j·G + g is old head g·R + j
        order = torch.arange(heads).view(kv_heads, per_kv).t().reshape(-1)
        rows = (order[:, None] * dim + torch.arange(dim)).reshape(-1).to(module.q_proj.weight.device)
        with torch.no_grad():
            module.q_proj.weight.copy_(module.q_proj.weight[rows])
            if module.q_proj.bias is not None:
                module.q_proj.bias.copy_(module.q_proj.bias[rows])
            module.o_proj.weight.copy_(module.o_proj.weight[:, rows])
        module.trainperf_packed_heads = True


_IMPLEMENTATIONS: dict[tuple[str, str, int | None], Callable[..., torch.Tensor]] = {}


def _attention_for(impl: str, device: torch.device) -> Callable[..., torch.Tensor]:
    """The registry's implementation, looked up once per device (every layer calls it each step).
    A plain table, not functools.cache: torch.compile traces through this call, and warns at
    every cache wrapper it meets there."""
    from trainperf.attention.registry import get_attention

    key = (impl, device.type, device.index)
    if key not in _IMPLEMENTATIONS:
        _IMPLEMENTATIONS[key] = get_attention(impl, device)
    return _IMPLEMENTATIONS[key]


def build_model(cfg, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """A randomly initialised causal LM for `cfg` on `device`, in `dtype`, in train mode."""
    from transformers import AutoModelForCausalLM

    _install_rope_dispatch()  # RoPE gets its own profiling range (fwd.layer.attn.attn.rope)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg)
    return model.to(dtype).train()


def compile_targets(model: torch.nn.Module) -> list[torch.nn.Module]:
    """What `--compile layers` compiles in a transformers causal LM: each decoder layer
    (`model.model.layers`) and the final norm; masks, embeddings and the loss stay eager."""
    body = getattr(model, "model", None)
    layers = getattr(body, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise Unsupported(f"--compile layers: {type(model).__name__} has no model.layers to compile")
    norm = getattr(body, "norm", None)
    return [*layers, *([norm] if isinstance(norm, torch.nn.Module) else [])]


def set_attention(model: torch.nn.Module, name: str) -> None:
    """Point every attention layer (they read the shared config at call time) at `name`."""
    model.config._attn_implementation = name


SWAPS = IMPLS  # RoPE and SwiGLU: the LM's own choices
SWIGLU_SWAPS = (*IMPLS, "quack")  # and for SwiGLU, quack's GEMMs with it in their epilogues
NORM_SWAPS = tuple(NORMS)


def apply_swaps(model: torch.nn.Module, norm: str = "torch", swiglu: str = "torch",
                rope: str = "torch", gemm: str = "torch") -> list[str]:
    """Put another RMSNorm (PyTorch's fused one, trainperf's Triton one, cuDNN's: by the names of
    models/norms.py), trainperf's Triton SwiGLU and RoPE kernels, quack's fused MLP
    (kernels/quack_mlp.py) or quack's tuned GEMMs in the attention projections
    (kernels/quack_gemm.py) into a transformers Llama, in place. Weights stay where they are (the
    norm modules are replaced by ones sharing the weight), except that the fused MLP stacks gate
    and up into one weight. Returns what was swapped, for the record.
    """
    done = []
    if swiglu != "torch" and getattr(model.config, "hidden_act", "silu") != "silu":
        raise ValueError(f"--swiglu {swiglu} needs hidden_act 'silu', not {model.config.hidden_act!r}")
    if norm != "torch":
        for name, module in list(model.named_modules()):
            if type(module).__name__.endswith("RMSNorm"):
                swapped = NORMS[norm](module.weight.shape[0], eps=module.variance_epsilon)
                swapped.weight = module.weight
                _replace(model, name, swapped)
        done.append(f"norm={norm}")
    if swiglu == "quack":
        from trainperf.kernels.quack_mlp import require_quack

        require_quack(next(model.parameters()).device)
        fuse_mlps(model)
        done.append("swiglu=quack")
    if swiglu == "triton":
        for _, module in _mlps(model):
            module.forward = types.MethodType(_swiglu_mlp_forward, module)
        done.append("swiglu=triton")
    if rope == "triton":
        _install_rope_dispatch()
        model.register_forward_pre_hook(functools.partial(_count_triton_rope_forward, 1))
        model.register_forward_hook(functools.partial(_count_triton_rope_forward, -1), always_call=True)
        done.append("rope=triton")
    if gemm == "quack":
        from trainperf.kernels.quack_gemm import require_tuned

        require_tuned(next(model.parameters()).device)
        tune_projections(model)
        done.append("gemm=quack")
    return done


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")  # an attention layer's Linears
# Whether trainperf's float8 attention rotates q and k inside their product, whose backward then
# takes their gradients back through RoPE in the kernel that casts the stacked gradient
# (kernels/float8_linear.py float8_qkv_rope), or leaves RoPE to transformers' function after it
# (always, for heads whose dimension that kernel does not take).
ROPE_IN_QKV_PRODUCT = True
# Whether that product's forward rotates q and k in trainperf's kernel (kernels/float8_linear.py
# rope_qk) or as transformers writes it, for Inductor to compile; a float8 attention layer's
# `rope_kernel` attribute, so that a probe can turn it off.
ROPE_KERNEL = True


def tune_projections(model: torch.nn.Module) -> None:
    """Have every attention layer's q, k, v and o projections multiply through quack_gemm's
    tuned_linear (quack's GEMM where a tuned configuration is known, cuBLAS elsewhere)."""
    from trainperf.kernels.quack_gemm import tuned_linear

    for attn in model.modules():
        if not all(hasattr(attn, a) for a in PROJECTIONS):
            continue
        for proj in (getattr(attn, a) for a in PROJECTIONS):
            if proj.bias is not None:
                raise Unsupported("--gemm quack takes attention projections without biases")
            proj.forward = types.MethodType(lambda self, x: tuned_linear(x, self.weight), proj)


def fuse_mlps(model: torch.nn.Module) -> None:
    """Replace every Llama MLP of `model` by a FusedSwiGLUMLP holding the same weights, and have
    its decoder layer hand the MLP the residual stream, which the MLP's last GEMM adds."""
    from trainperf.kernels.quack_mlp import FusedSwiGLUMLP

    for name, module in _mlps(model):
        _replace(model, name, FusedSwiGLUMLP(module))
        layer = model.get_submodule(name.rpartition(".")[0])
        layer.forward = types.MethodType(_layer_forward_residual_in_mlp, layer)


def _layer_forward_residual_in_mlp(self, hidden_states: torch.Tensor, **kwargs: object) -> torch.Tensor:  # noqa: ANN001
    """transformers' Llama decoder layer, but for the MLP's residual add, which the MLP does."""
    attn, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)
    hidden_states = hidden_states + attn
    return self.mlp(self.post_attention_layernorm(hidden_states), residual=hidden_states)


def float8_layers(model: torch.nn.Module, attention: bool = True) -> None:
    """Replace every Llama MLP of `model` by trainperf's float8 MLP (kernels/float8_mlp.py) on the
    same weights and, with `attention`, have every attention layer's projections multiply on
    float8 GEMMs (float8_attention); unsupported without Triton or off a GPU with float8 tensor
    cores (sm_89+)."""
    from trainperf.kernels import require_float8_gemms

    require_float8_gemms(next(model.parameters()).device, "--float8 trainperf")
    from trainperf.kernels.float8_mlp import Float8SwiGLUMLP

    for name, module in _mlps(model):
        _replace(model, name, Float8SwiGLUMLP(module))
        layer = model.get_submodule(name.rpartition(".")[0])
        if all(type(getattr(layer, n, None)).__name__ == "LlamaRMSNorm" for n in _NORMS):
            layer.float8_norms = FLOAT8_NORMS
            layer.forward = types.MethodType(_layer_forward_float8_norms, layer)
    if attention:
        float8_attention(model)


# Whether a decoder layer with trainperf's float8 MLP runs its norms and residual adds in trainperf's
# kernels (kernels/float8_norm.py: the norm before the MLP fused with the residual add and the MLP's
# cast, each norm's backward with the residual's gradient), or as transformers writes them (Inductor's
# kernels when compiled); a layer's `float8_norms` attribute, so that a probe can turn it off.
FLOAT8_NORMS = True
_NORMS = ("input_layernorm", "post_attention_layernorm")  # a Llama decoder layer's RMSNorms


def _layer_forward_float8_norms(self, hidden_states: torch.Tensor, **kwargs: object) -> torch.Tensor:  # noqa: ANN001
    """transformers' Llama decoder layer with its norms and residual adds in trainperf's kernels
    around its float8 MLP (FLOAT8_NORMS)."""
    from trainperf.kernels import stores_right
    from trainperf.kernels.float8_norm import float8_residual_mlp

    if not (self.float8_norms and stores_right(hidden_states)):
        return type(self).forward(self, hidden_states, **kwargs)
    from trainperf.kernels.rmsnorm import rmsnorm_with_skip

    before, after = (getattr(self, n) for n in _NORMS)
    if getattr(self.self_attn, "rope_in_product", False):
        attn, hidden_states = _normed_attention_float8(self.self_attn, hidden_states, before, **kwargs)
    else:
        normed, hidden_states = rmsnorm_with_skip(hidden_states, before.weight, before.variance_epsilon)
        attn, _ = self.self_attn(hidden_states=normed, **kwargs)
    mlp = self.mlp
    return float8_residual_mlp(hidden_states, attn, after.weight, after.variance_epsilon,
                               mlp.gate_up.weight, mlp.down_proj.weight, mlp.state)


def float8_attention(model: torch.nn.Module) -> None:
    """Have every attention layer of `model` compute q, k and v as one float8 product on their
    stacked weights, and o as another (kernels/float8_linear.py). The weights stay the
    projections' own; each product keeps its scales on the layer."""
    from transformers.models.llama import modeling_llama

    from trainperf.kernels.float8_linear import linear_state, rope_grad_cast_takes
    from trainperf.kernels.float8_mlp import check_dims

    for attn in model.modules():
        if not all(hasattr(attn, a) for a in PROJECTIONS):
            continue
        projections = [getattr(attn, a) for a in PROJECTIONS]
        if any(proj.bias is not None for proj in projections):
            raise Unsupported("--float8 trainperf-all takes attention projections without biases")
        check_dims(*(d for proj in projections for d in proj.weight.shape))
        attn.float8_qkv, attn.float8_o = linear_state(attn.q_proj.weight), linear_state(attn.o_proj.weight)
        attn.llama_functions = (modeling_llama.apply_rotary_pos_emb, modeling_llama.ALL_ATTENTION_FUNCTIONS,
                                modeling_llama.eager_attention_forward)
        attn.rope_in_product = ROPE_IN_QKV_PRODUCT and rope_grad_cast_takes(attn.head_dim)
        attn.rope_kernel = ROPE_KERNEL
        attn.forward = types.MethodType(_attention_forward_float8, attn)


_CACHES = ("cache", "past_key_values", "past_key_value")  # a KV cache, by transformers' names


def _attention_forward_float8(self, hidden_states: torch.Tensor,  # noqa: ANN001
                              position_embeddings: tuple[torch.Tensor, torch.Tensor],
                              attention_mask: torch.Tensor | None = None,
                              **kwargs: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' Llama attention, but for its projections: q, k and v one float8 product on
    their stacked weights (RoPE inside it where the layer's `rope_in_product` says), o another.
    transformers' functions come bound to the layer: importing
    their module here broke the compiled layer's graph (torch 2.11's Dynamo cannot import from
    transformers' lazy modules) and left the attention block eager."""
    from trainperf.kernels.float8_linear import float8_linear, float8_qkv_rope

    _refuse_caches(kwargs)
    input_shape = hidden_states.shape[:-1]
    if self.rope_in_product:
        query, key, value = (t.transpose(1, 2) for t in float8_qkv_rope(
            hidden_states, _qkv_weight(self), *position_embeddings, self.float8_qkv, _qkv_heads(self),
            self.rope_kernel))
    else:
        qkv = float8_linear(hidden_states, _qkv_weight(self), self.float8_qkv)
        query, key, value = (t.view(*input_shape, -1, self.head_dim).transpose(1, 2)
                             for t in qkv.split([p.out_features for p in _qkv(self)], dim=-1))
        query, key = self.llama_functions[0](query, key, *position_embeddings)
    return _attend_float8(self, query, key, value, attention_mask, **kwargs)


def _normed_attention_float8(self, x: torch.Tensor, norm: torch.nn.Module,  # noqa: ANN001
                             position_embeddings: tuple[torch.Tensor, torch.Tensor],
                             attention_mask: torch.Tensor | None = None,
                             **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
    """_attention_forward_float8 of norm(x) with RoPE inside the product and the norm fused into
    its input's cast (kernels/float8_linear.py float8_norm_qkv_rope); the attention's output and x
    to carry on as the residual stream."""
    from trainperf.kernels.float8_linear import float8_norm_qkv_rope

    _refuse_caches(kwargs)
    *qkv, residual = float8_norm_qkv_rope(x, norm.weight, norm.variance_epsilon, _qkv_weight(self),
                                          *position_embeddings, self.float8_qkv, _qkv_heads(self),
                                          self.rope_kernel)
    query, key, value = (t.transpose(1, 2) for t in qkv)
    return _attend_float8(self, query, key, value, attention_mask, **kwargs)[0], residual


def _refuse_caches(kwargs: dict[str, object]) -> None:
    if any(kwargs.pop(name, None) is not None for name in _CACHES):
        raise Unsupported("--float8 trainperf-all trains; it takes no KV cache")


def _qkv(attn: torch.nn.Module) -> list[torch.nn.Module]:
    return [getattr(attn, name) for name in PROJECTIONS[:3]]


def _qkv_weight(attn: torch.nn.Module) -> torch.Tensor:
    """The q, k and v projections' weights stacked, for their one product."""
    return torch.cat([p.weight for p in _qkv(attn)])


def _qkv_heads(attn: torch.nn.Module) -> tuple[int, int, int]:
    return tuple(p.out_features // attn.head_dim for p in _qkv(attn))


def _attend_float8(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,  # noqa: ANN001
                   attention_mask: torch.Tensor | None, **kwargs: object
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention of q, k and v [batch, heads, seq, D] by the model's attention function, and
    the o projection's float8 product on its output."""
    from trainperf.kernels.float8_linear import float8_linear

    _, attention_functions, eager_attention = self.llama_functions
    attention = attention_functions.get_interface(self.config._attn_implementation, eager_attention)
    out, weights = attention(self, query, key, value, attention_mask,
                             dropout=0.0 if not self.training else self.attention_dropout,
                             scaling=self.scaling, **kwargs)
    out = out.reshape(query.shape[0], query.shape[2], -1).contiguous()
    return float8_linear(out, self.o_proj.weight, self.float8_o), weights


def _mlps(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The (name, module) of each gated Llama MLP in `model`."""
    return [(name, m) for name, m in model.named_modules()
            if type(m).__name__.endswith("MLP") and hasattr(m, "gate_proj")]


def _replace(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    """Put `module` where the submodule `name` of `model` is."""
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


# transformers' Llama calls the module-level apply_rotary_pos_emb; it is replaced once by a
# dispatcher that takes the Triton path only while a model swapped with rope=triton runs forward
# (the count below), so other models in the process keep the stock function. Either path runs in
# its own profiling range. The count is a plain global, which torch.compile reads and guards on:
# a ContextVar's get cannot be traced, and it broke every compiled decoder layer's graph at RoPE.
_triton_rope_forwards = 0


def _count_triton_rope_forward(delta: int, *_: object) -> None:
    """A forward hook's body: `delta` is +1 as a rope=triton model's forward starts, -1 as it ends."""
    global _triton_rope_forwards
    _triton_rope_forwards += delta


def _install_rope_dispatch() -> None:
    from transformers.models.llama import modeling_llama

    stock = modeling_llama.apply_rotary_pos_emb
    if getattr(stock, "trainperf_dispatch", False):
        return

    def triton(q, k, cos, sin):  # noqa: ANN001, ANN202
        from trainperf.kernels import require_triton

        require_triton(q.device, "--rope triton")
        from trainperf.kernels.rope import rope_triton_hf
        return rope_triton_hf(q, cos, sin), rope_triton_hf(k, cos, sin)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):  # noqa: ANN001, ANN202
        if _triton_rope_forwards and unsqueeze_dim == 1:
            return in_sub_range("rope", triton, q, k, cos, sin)
        return in_sub_range("rope", stock, q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.trainperf_dispatch = True
    modeling_llama.apply_rotary_pos_emb = apply_rotary_pos_emb


def _swiglu_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    from trainperf.kernels import require_triton

    require_triton(x.device, "--swiglu triton")
    from trainperf.kernels.swiglu import swiglu_triton
    return self.down_proj(swiglu_triton(self.gate_proj(x), self.up_proj(x)))
