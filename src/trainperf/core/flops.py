"""FLOP counts for a Transformer step and the peak rates of known GPUs, for TFLOP/s and MFU.

Forward FLOPs of a decoder-only Transformer processing `tokens` tokens of length `seq_len`:

    dense      = 2 · N · tokens                  N = parameters inside matrix multiplies
                                                 (projections, MLP, LM head; not embeddings)
    attention  = 4 · L · seq_len · d_attn · tokens    (QKᵀ and P·V, 2 FLOPs per MAC)
                 × ½ when causal (only the lower triangle is needed)

Backward costs twice the forward, so a training step is 3× forward (the classic 6·N·tokens plus
the attention term). The optimizer's element-wise work is not counted.
"""

from __future__ import annotations

from collections.abc import Callable

PASSES = {"forward": 1.0, "forward-backward": 3.0, "train": 3.0}

# Dense (no sparsity) peak TFLOP/s by datasheet. Checked in order: first substring match wins.
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("GH200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("B200", {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp32": 80.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
]


def transformer_flops(matmul_params: int, n_layers: int, d_attn: int, seq_len: int, tokens: int,
                      causal: bool = True, mode: str = "train") -> float:
    """FLOPs of one step of `mode` ('forward', 'forward-backward' or 'train'); see module doc."""
    attention = 4.0 * n_layers * seq_len * d_attn * tokens * (0.5 if causal else 1.0)
    return PASSES[mode] * (2.0 * matmul_params * tokens + attention)


def peak_tflops(gpu_name: str | None, precision: str, tf32: bool = True) -> float | None:
    """Datasheet dense peak for this GPU and precision, or None when the GPU is not in the table."""
    if not gpu_name:
        return None
    key = "tf32" if precision == "fp32" and tf32 else precision
    for pattern, rates in PEAK_TFLOPS:
        if pattern in gpu_name:
            return rates.get(key)
    return None


SDPA_KERNELS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")


def counted_flops(step: Callable[[], object]) -> int:
    """FLOPs of the operators `step` runs (its forward, and its backward where it runs one), as
    PyTorch's flop counter counts them: matrix products and attention, for any model. Attention is
    counted whole, causal or not, where the analytic count halves it; grouped K/V heads count as
    the query's heads (the counter of torch < 2.12 refuses their shapes), and the CPU's fused
    attention as the GPU's (the counter leaves it out)."""
    import torch
    from torch.utils import flop_counter

    def heads_of_query(query: tuple, key: tuple, value: tuple) -> tuple[tuple, tuple, tuple]:
        return query, (*key[:1], query[1], *key[2:]), (*value[:1], query[1], *value[2:])

    def forward(query, key, value, *_, out_shape=None, **__) -> int:  # noqa: ANN001
        return flop_counter.sdpa_flop_count(*heads_of_query(query, key, value))

    def backward(grad_out, query, key, value, *_, out_shape=None, **__) -> int:  # noqa: ANN001
        return flop_counter.sdpa_backward_flop_count(grad_out, *heads_of_query(query, key, value))

    aten = torch.ops.aten
    kernels = [name for name in SDPA_KERNELS if hasattr(aten, name)]
    mapping = {getattr(aten, k): forward for k in kernels}
    mapping.update({getattr(aten, f"{k}_backward"): backward for k in kernels
                    if hasattr(aten, f"{k}_backward")})
    with flop_counter.FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        step()
    return counter.get_total_flops()
