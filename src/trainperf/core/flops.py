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


# The SM clock the datasheet peaks assume (the boost clock), MHz. First substring match wins.
BOOST_MHZ: list[tuple[str, float]] = [("GH200", 1980.0), ("H100 PCIe", 1755.0), ("H100", 1980.0),
                                      ("H200", 1980.0), ("B200", 1965.0), ("A100", 1410.0),
                                      ("L40S", 2520.0), ("L4", 2040.0), ("A10", 1695.0)]


def limits(tflops: float, peak: float | None, gpu_name: str | None, sm_clock_mhz: float | None,
           recompute_share: float = 0.0, float8: bool = False) -> dict[str, float]:
    """How far a step's TFLOP/s (per GPU, of the model's FLOPs) is from what the GPU can do:
      mfu_at_clock    against the peak at the SM clock measured while timing (the datasheet peak
                      scaled by that clock over the boost clock: the power cap's peak)
      hfu             hardware FLOPs, the recomputed forward counted too, against the peak
      fp8_peak_share  for a float8 step, against the float8 peak (twice the bf16 one on Hopper
                      and Blackwell); its MFU stays bf16-equivalent
    Each only where its inputs are known (a GPU in the tables, a sampled clock)."""
    out: dict[str, float] = {}
    if not peak:
        return out
    boost = next((mhz for pattern, mhz in BOOST_MHZ if gpu_name and pattern in gpu_name), None)
    if boost and sm_clock_mhz:
        out["peak_at_clock_tflops"] = peak * sm_clock_mhz / boost
        out["mfu_at_clock"] = tflops / out["peak_at_clock_tflops"]
    if recompute_share:
        out["hfu"] = tflops * (1 + recompute_share) / peak
    if float8:
        out["fp8_peak_share"] = tflops / (2 * peak)
    return out


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
