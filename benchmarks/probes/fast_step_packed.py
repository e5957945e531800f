"""Probe: the fastest step with and without its latest changes: the grouped-query attention packed
(`--kv-heads packed`: each K/V head's query heads as one sequence, attention/fa4_packed.py), the
MLP's residual add in the down projection's epilogue (kernels/quack_mlp.py), quack's tuned GEMMs in
the attention projections and the LM head (`--gemm quack`, kernels/quack_gemm.py), and Inductor's
coordinate-descent tuning of the compiled layers' kernels; and one candidate: quack's RMSNorm (the
attention's residual add inside the second norm). usage: PYTHONPATH=src python3
benchmarks/probes/fast_step_packed.py DEADLINE_EPOCH SHAPE:VARIANT,VARIANT...

A VARIANT is native or packed (the K/V heads), then any of +residual (the MLP adds the residual;
without it the decoder layer adds it, as transformers does), +tuned (`--compile layers-tuned`),
+qnorm (both norms of each layer on quack's RMSNorm, outside the compiled graphs; implies
+residual), +cublas (`--gemm torch`: the projections and the LM head on cuBLAS, where the recipe
takes quack's tuned GEMMs), +fp8 (the `fp8-trainperf` recipe, trainperf's float8 MLP, with quack's
tuned GEMMs where the recipe takes them, as `fast` does), +cudnn (the attention on PyTorch's cuDNN
SDPA instead of FlashAttention 4, reading no mask so that it can be captured; with native K/V
heads) and +torchmlp (the MLP's GEMMs on cuBLAS with Inductor's SwiGLU, as the whole-model compile
runs them; without +residual), e.g. 24x768:packed+residual+cublas,packed+residual. Per shape
each variant is built (each decoder layer compiled, FA4, quack's MLP, the chunked loss), captured
as a CUDA graph as the suite runs it, and the variants take turns in three rounds of 10 replays:
CUDA-event time, energy, clock and power, and the capture's peak memory; the first variant is the
baseline.
"""

import sys
import time
import types

import torch

from trainperf.core.ab_rounds import alternating_rounds, cases_in_time, summary
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 200  # the most one build of the step is expected to take (FA4 and quack compile on first use)
KV_HEADS, FLAGS = ("native", "packed"), ("residual", "tuned", "qnorm", "cublas", "fp8", "cudnn", "torchmlp")


def residual_outside(step: llama_sdpa.LlamaStep) -> None:
    """Give each decoder layer back transformers' forward: the MLP returns, the layer adds."""
    for layer in step.model.model.layers:
        layer.forward = types.MethodType(type(layer).forward, layer)


@torch._dynamo.disable
def quack_rmsnorm(x: torch.Tensor, norm: torch.nn.Module, residual: torch.Tensor | None = None):  # noqa: ANN201
    """quack's RMSNorm of `x` (of x + residual, and that sum too, given the residual)."""
    from quack.rmsnorm import rmsnorm

    return rmsnorm(x, norm.weight, residual=residual, eps=norm.variance_epsilon, prenorm=residual is not None)


def layer_with_quack_norms(self, hidden_states: torch.Tensor, **kwargs: object) -> torch.Tensor:  # noqa: ANN001
    attn, _ = self.self_attn(hidden_states=quack_rmsnorm(hidden_states, self.input_layernorm), **kwargs)
    normed, hidden_states = quack_rmsnorm(attn, self.post_attention_layernorm, residual=hidden_states)
    return self.mlp(normed, residual=hidden_states)


def quack_norms(step: llama_sdpa.LlamaStep) -> None:
    for layer in step.model.model.layers:
        layer.forward = types.MethodType(layer_with_quack_norms, layer)


def causal_without_mask(step: llama_sdpa.LlamaStep) -> None:
    """PyTorch's attention without transformers' mask (its host read of the mask breaks a capture)."""
    step.reads_mask = False


def preparation(flags: list[str]):  # noqa: ANN201
    """What `flags` change in the model before its first iteration compiles it."""
    changes = [] if {"residual", "qnorm"} & set(flags) else [residual_outside]
    changes += [quack_norms] if "qnorm" in flags else []
    changes += [causal_without_mask] if "cudnn" in flags else []

    def prepare(step: llama_sdpa.LlamaStep) -> None:
        for change in changes:
            change(step)

    return prepare


def built(shape: str, variant: str) -> llama_sdpa.LlamaStep:
    t0 = time.time()
    kv_heads, *flags = variant.split("+")
    fields = {"compile": "layers-tuned"} if "tuned" in flags else {}
    fields |= {"gemm": "torch"} if "cublas" in flags else {}
    fields |= {"sdpa_backend": "CUDNN_ATTENTION"} if "cudnn" in flags else {}
    fields |= {"swiglu": "torch"} if "torchmlp" in flags else {}
    recipe = "fp8-trainperf" if "fp8" in flags else "fast"
    step = llama_sdpa.recipe_step(recipe, *map(int, shape.split("x")), kv_heads=kv_heads, **fields,
                                  prepare=preparation(flags))
    print(f"{shape} {variant}: first loss {step().item():.5f}", flush=True)
    print(f"{shape} {variant} ({', '.join(step.swaps)}): built in {time.time() - t0:.0f} s", flush=True)
    return step


def in_step(shape: str, variants: list[str], deadline: float) -> None:
    steps = {v: built(shape, v) for v in variants}
    try:
        makers = {v: (lambda s=s: GraphedIteration(s)) for v, s in steps.items()}
        results = alternating_rounds(makers, 3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
    finally:
        for step in steps.values():
            step.close()
    for line in summary(results, variants[0]):
        print(shape, line, flush=True)


def known(variant: str) -> bool:
    kv_heads, *flags = variant.split("+")
    return kv_heads in KV_HEADS and set(flags) <= set(FLAGS)


def main() -> None:
    deadline, cases = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for case in cases_in_time(cases, deadline, 2 * BUILD_S):
        shape, _, names = case.partition(":")
        variants = names.split(",")
        if bad := [v for v in variants if not known(v)]:
            sys.exit(f"unknown variants {bad}: {'|'.join(KV_HEADS)}, then any of +{', +'.join(FLAGS)}")
        in_step(shape, variants, deadline)


if __name__ == "__main__":
    main()
