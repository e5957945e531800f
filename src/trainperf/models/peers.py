"""What users pick instead of trainperf's step, applied to a transformers Llama: Liger Kernel's
patches (RoPE, RMSNorm, SwiGLU, fused linear cross-entropy) and torchao's float8 training; and to
any other model (`ANY_MODEL_RECIPES`): Liger's patch for its family with its fused linear
cross-entropy (models/head_loss.py: where it computes the model's own loss), torchao's float8 on
its Linears, and trainperf's own kernels where they compute what the model's modules do: its chunked LM-head
loss (models/head_loss.py) and, in blocks that run eagerly, its RMSNorm. In compiled blocks the
norms stay the model's: Inductor fuses them with the residual adds and casts around them, which a
Triton kernel of its own would stop (measured: Qwen2.5-1.5B's compiled step 180 ms, 204 ms with
trainperf's RMSNorm; benchmarks/results/your-model/h200-2026-11-29d), as trainperf's fastest Llama
step leaves them to Inductor too.

Each is an optional extra; without its package a case is an `unsupported` row naming the install
command. Liger patches the transformers Llama module as well as the model instance; the patch is
undone when the case ends, so that the stock rows of the same run stay stock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec

import torch

from trainperf.core.errors import SpecError, Unsupported

LIBRARIES = ("none", "liger")
FLOAT8 = ("off", "torchao", "torchao-mlp", "torchao-attention", "torchao-rowwise",
          "trainperf", "trainperf-all", "trainperf-head")
# trainperf's own float8 (delayed scaling): its float8 MLP (kernels/float8_mlp.py); with
# trainperf-all, the attention projections' products too (kernels/float8_linear.py); with
# trainperf-head, the chunked loss's LM-head products as well (kernels/float8_head.py)
TRAINPERF_FLOAT8 = ("trainperf", "trainperf-all", "trainperf-head")
# torchao's float8 choices: the decoder's products they take and how they scale. The narrower ones
# tell which products or which scaling move a float8 run's loss off stock's band (docs/peers.md).
TORCHAO_FLOAT8 = {"torchao": ("all", "tensorwise"), "torchao-mlp": ("mlp", "tensorwise"),
                  "torchao-attention": ("attention", "tensorwise"), "torchao-rowwise": ("all", "rowwise")}
_PRODUCTS = {"all": "", "mlp": ".mlp.", "attention": ".self_attn."}  # in a transformers Llama's module names
INSTALL = {"liger": "pip install 'trainperf[liger]' (liger-kernel)",
           "torchao": "pip install 'trainperf[float8]' (torchao)"}
_LIGER_PATCHED = ("apply_rotary_pos_emb", "LlamaRMSNorm", "LlamaMLP")

HiddenLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def check_float8_loss(float8: str, loss: str) -> None:
    """SpecError where `--float8 trainperf-head`, which puts the chunked loss's LM-head products on
    float8 GEMMs (kernels/float8_head.py), comes without that loss."""
    if float8 == "trainperf-head" and loss != "chunked":
        raise SpecError("--float8 trainperf-head puts the chunked loss's LM-head products on float8 GEMMs: "
                        "it takes --loss chunked")


def _need(package: str, name: str) -> None:
    if find_spec(package) is None:
        raise Unsupported(f"{name} needs {INSTALL[name]}")


def apply_liger(model: torch.nn.Module) -> tuple[Callable[[], None], HiddenLoss]:
    """Liger Kernel on `model` (RoPE, RMSNorm, SwiGLU), and its fused linear cross-entropy as
    `loss(hidden [tokens, d], lm_head weight, targets [tokens])`. Returns (undo, loss)."""
    _need("liger_kernel", "liger")
    if not torch.cuda.is_available() or next(model.parameters()).device.type != "cuda":
        raise Unsupported("liger: Liger Kernel's Triton kernels need a CUDA GPU")
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss, apply_liger_kernel_to_llama
    from transformers.models.llama import modeling_llama

    saved = {name: getattr(modeling_llama, name) for name in _LIGER_PATCHED}
    apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                fused_linear_cross_entropy=False, model=model)
    flce = LigerFusedLinearCrossEntropyLoss()

    def undo() -> None:
        for name, value in saved.items():
            setattr(modeling_llama, name, value)

    return undo, lambda hidden, weight, targets: flce(weight, hidden, targets)


ANY_MODEL_RECIPES = ("stock", "liger", "float8", "trainperf")
# Liger's patches for a family, those its function takes; its losses are not patched in (its fused
# linear cross-entropy is taken from the hidden states, as trainperf's chunked loss is)
_LIGER_KERNELS = {"rope": True, "rms_norm": True, "swiglu": True, "geglu": True, "layer_norm": True,
                  "cross_entropy": False, "fused_linear_cross_entropy": False}


@dataclass(frozen=True)
class Applied:
    """A recipe on a model: what undoes it when the case ends, the loss it computes instead of the
    model's logits' (None: those), and what it swapped, for the record."""

    undo: Callable[[], None]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    swaps: str = ""


def apply_recipe(model: torch.nn.Module, recipe: str, compiled: bool = False) -> Applied:
    """`recipe` (ANY_MODEL_RECIPES) on any model, whose blocks are compiled after it where
    `compiled` (module doc)."""
    if recipe == "liger":
        return apply_liger_recipe(model)
    if recipe == "trainperf":
        return apply_trainperf(model, compiled)
    if recipe == "float8":
        apply_float8(model)
        from torchao.float8.float8_linear import Float8Linear

        if not any(isinstance(m, Float8Linear) for m in model.modules()):
            raise Unsupported(f"float8: {type(model).__name__} has no nn.Linear outside lm_head with dims a "
                              "multiple of 16 (GPT-2's Conv1D products are not Linears)")
        return Applied(lambda: None, swaps="float8=torchao")
    return Applied(lambda: None)


def apply_liger_recipe(model: torch.nn.Module) -> Applied:
    """Liger's patch for the model's family and, where it computes the model's own loss, its fused
    linear cross-entropy."""
    from trainperf.models.head_loss import head_loss

    undo = apply_liger_to_family(model)  # Unsupported, naming why, where Liger cannot run
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    flce = LigerFusedLinearCrossEntropyLoss()
    try:
        loss = head_loss(model, lambda hidden, weight, targets: flce(weight, hidden, targets),
                         "liger fused linear cross-entropy")
    except Unsupported:  # the kernels stay, the loss is the model's
        return Applied(undo, swaps="liger")
    return Applied(undo, loss, "liger,loss=liger-flce")


def apply_trainperf(model: torch.nn.Module, compiled: bool) -> Applied:
    """trainperf's chunked loss and, in eager blocks, its RMSNorm, each where it computes what the
    model does (module doc); Unsupported, with each reason, where neither does."""
    from trainperf.models.head_loss import chunked_head_loss

    swaps, why, loss = [], [], None
    try:
        loss = chunked_head_loss(model)
        swaps.append("loss=chunked")
    except Unsupported as exc:
        why.append(str(exc))
    if compiled:
        why.append("trainperf: its RMSNorm goes only into blocks that run eagerly (--compile off)")
    else:
        try:
            swaps.append(f"norm=triton x{swap_rmsnorms(model)}")
        except Unsupported as exc:
            why.append(str(exc))
    if not swaps:
        raise Unsupported("; ".join(why))
    return Applied(lambda: None, loss, ",".join(swaps))


def swap_rmsnorms(model: torch.nn.Module) -> int:
    """trainperf's Triton RMSNorm (models/norms.TritonRMSNorm, the same weight) in place of each
    module named *RMSNorm whose output it reproduces on a random input; how many it replaced.
    Unsupported where none does (Gemma's RMSNorm scales by 1 + weight; GPT-2 has LayerNorms)."""
    from trainperf.kernels import require_triton
    from trainperf.models.norms import TritonRMSNorm

    require_triton(next(model.parameters()).device, "--recipe trainperf")
    swapped = 0
    for name, module in list(model.named_modules()):
        weight = getattr(module, "weight", None)
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
        named_rmsnorm = type(module).__name__.endswith("RMSNorm")
        if not named_rmsnorm or weight is None or weight.dim() != 1 or eps is None:
            continue
        ours = TritonRMSNorm(weight.numel(), float(eps))
        ours.weight = weight
        x = torch.randn(4, weight.numel(), device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            if not torch.allclose(ours(x), module(x), rtol=1e-4, atol=1e-5):
                continue
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, ours)
        swapped += 1
    if not swapped:
        raise Unsupported(f"trainperf: no RMSNorm of {type(model).__name__} computes what trainperf's kernel "
                          "does (x / rms(x) * weight): Gemma's scales by 1 + weight, GPT-2 has LayerNorms")
    return swapped


def apply_liger_to_family(model: torch.nn.Module) -> Callable[[], None]:
    """Liger Kernel's patch for the model's family (its config's model_type), on the model and its
    transformers module; returns what puts that module back, so later stock cases stay stock."""
    import inspect
    import sys

    _need("liger_kernel", "liger")
    if not torch.cuda.is_available() or next(model.parameters()).device.type != "cuda":
        raise Unsupported("liger: Liger Kernel's Triton kernels need a CUDA GPU")
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    family = getattr(getattr(model, "config", None), "model_type", None)
    patch = MODEL_TYPE_TO_APPLY_LIGER_FN.get(family)
    if patch is None:
        raise Unsupported(f"liger: Liger Kernel has no patch for {family or type(model).__name__} "
                          f"(it has: {', '.join(sorted(MODEL_TYPE_TO_APPLY_LIGER_FN))})")
    module = sys.modules[type(model).__module__]
    saved = dict(vars(module))
    takes = inspect.signature(patch).parameters
    patch(model=model, **{k: v for k, v in _LIGER_KERNELS.items() if k in takes})

    def undo() -> None:
        for name, value in saved.items():
            setattr(module, name, value)

    return undo


def float8_takes(products: str) -> Callable[[torch.nn.Module, str], bool]:
    """torchao's module filter: the decoder's Linears among `products` (all, mlp, attention) whose
    dims float8 GEMMs take (multiples of 16); never the LM head."""
    mark = _PRODUCTS[products]

    def takes(module: torch.nn.Module, fqn: str) -> bool:
        return (isinstance(module, torch.nn.Linear) and "lm_head" not in fqn and mark in fqn
                and module.in_features % 16 == 0 and module.out_features % 16 == 0)

    return takes


def apply_float8(model: torch.nn.Module, choice: str = "torchao", fsdp_all_gather: bool = False) -> None:
    """torchao's float8 training as `choice` (TORCHAO_FLOAT8) names it, on the decoder's Linears
    among its products (float8_takes); the LM head stays bf16. `tensorwise`: dynamic scaling from
    each tensor's amax, scales rounded to powers of two, which multiply exactly, so scaling adds no
    rounding of its own; `rowwise`: torchao's rowwise recipe (a scale per row, also powers of two).
    docs/peers.md has what each does to the loss curve. `fsdp_all_gather` (tensorwise): FSDP2
    gathers those weights in float8, half the bytes of bf16 (call before fully_shard, and
    `precompute_float8_scales` after each optimizer step)."""
    _need("torchao", "torchao")
    device = next(model.parameters()).device
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
        raise Unsupported("float8 torchao needs a GPU with float8 tensor cores (sm_89 or newer)")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    products, scaling = TORCHAO_FLOAT8[choice]
    if scaling == "rowwise":
        config = Float8LinearConfig.from_recipe_name("rowwise")
    else:
        config = Float8LinearConfig(round_scales_to_power_of_2=True,
                                    enable_fsdp_float8_all_gather=fsdp_all_gather)
    convert_to_float8_training(model, config=config, module_filter_fn=float8_takes(products))


def precompute_float8_scales(model: torch.nn.Module) -> None:
    """The float8 scales of every sharded weight in one all-reduce, for the next step's float8
    all-gathers (without it, each weight's scale takes a collective of its own)."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    precompute_float8_dynamic_scale_for_fsdp(model)
