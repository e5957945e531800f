"""Probe: does each lever of trainperf's float8 step pay in the step?
usage: PYTHONPATH=src python3 benchmarks/probes/float8_step_levers.py DEADLINE_EPOCH SHAPE[:VARIANT,...]...
(every variant where a shape names none)

`fp8-trainperf-all` at each shape as trainperf runs it (`all`), beside it with one lever taken
back at a time, and torchao's `fp8`, in one process:
- `all-float32`: the backward products accumulating in float32 (kernels/float8_mlp.py
  FAST_BACKWARD off), as torchao's do;
- `all-rope-apart`: RoPE outside the q, k and v product, as transformers applies it: its backward
  writes the stacked bf16 gradient, which the product's backward then casts (kernels/float8_linear.py
  float8_qkv_rope does both in one kernel).
Each step is captured once as a CUDA graph, as the suite runs it, and the variants take turns in
three rounds of 10 replays (core/ab_rounds.py): CUDA-event time, energy, clock and power (the peak
memory it prints is the replays' alone: each graph is captured before the rounds). Before its
capture each float8 step runs once with its products counted by how they accumulate and its
RoPE-gradient casts counted, so a build that did not take its setting shows.
"""

import collections
import sys
import time
import types

import torch

from trainperf.core.ab_rounds import alternating_rounds, cases_in_time, summary
from trainperf.kernels import float8_linear, float8_mlp
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 300  # the steps' first builds at a shape, before one is measured


def calls_seen(step: llama_sdpa.LlamaStep) -> dict[str, int]:
    """One iteration's trainperf float8 products by how they accumulate, and its casts of the q, k
    and v product's gradient that take RoPE's backward in (float8_qkv_rope)."""
    counts: dict[str, int] = collections.Counter()
    product, scale = float8_mlp.float8_product, float8_linear.next_scale

    def counted_product(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        counts[f"fast {args[5] if len(args) > 5 else kwargs.get('fast', False)}"] += 1
        return product(*args, **kwargs)

    def counted_scale(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        counts["rope-grad casts"] += 1
        return scale(*args, **kwargs)

    float8_mlp.float8_product, float8_linear.next_scale = counted_product, counted_scale
    try:
        step()
        torch.cuda.synchronize()
    finally:
        float8_mlp.float8_product, float8_linear.next_scale = product, scale
    return dict(counts)


def rope_apart(step: llama_sdpa.LlamaStep) -> None:
    """Give every float8 attention layer the forward with RoPE outside its q, k and v product."""
    from transformers.models.llama import modeling_llama

    for module in step.model.modules():
        if hasattr(module, "float8_qkv"):
            module.rope_apart = (modeling_llama.apply_rotary_pos_emb, modeling_llama.ALL_ATTENTION_FUNCTIONS,
                                 modeling_llama.eager_attention_forward)
            module.forward = types.MethodType(_attention_forward_rope_apart, module)


def _attention_forward_rope_apart(self, hidden_states, position_embeddings, attention_mask=None,  # noqa: ANN001, ANN202
                                  **kwargs):  # noqa: ANN003
    input_shape = hidden_states.shape[:-1]
    qkv_weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
    qkv = float8_linear.float8_linear(hidden_states, qkv_weight, self.float8_qkv)
    sizes = [p.out_features for p in (self.q_proj, self.k_proj, self.v_proj)]
    query, key, value = (t.view(*input_shape, -1, self.head_dim).transpose(1, 2)
                         for t in qkv.split(sizes, dim=-1))
    rotary, attention_functions, eager_attention = self.rope_apart
    query, key = rotary(query, key, *position_embeddings)
    attention = attention_functions.get_interface(self.config._attn_implementation, eager_attention)
    out, weights = attention(self, query, key, value, attention_mask, dropout=0.0, scaling=self.scaling,
                             **kwargs)
    out = out.reshape(*input_shape, -1).contiguous()
    return float8_linear.float8_linear(out, self.o_proj.weight, self.float8_o), weights


VARIANTS = {  # name: (recipe, fast backward, prepare)
    "fp8": ("fp8", True, None),
    "all-float32": ("fp8-trainperf-all", False, None),
    "all-rope-apart": ("fp8-trainperf-all", True, rope_apart),
    "all": ("fp8-trainperf-all", True, None),
}


def captured(shape: str, recipe: str, fast: bool, prepare) -> tuple[llama_sdpa.LlamaStep, GraphedIteration]:  # noqa: ANN001
    float8_mlp.FAST_BACKWARD = fast
    t0 = time.time()
    step = llama_sdpa.recipe_step(recipe, *map(int, shape.split("x")), prepare=prepare)
    print(f"{shape} {recipe} fast backward {fast}, {getattr(prepare, '__name__', 'as trainperf runs it')}: "
          f"built in {time.time() - t0:.0f} s, calls {calls_seen(step)}", flush=True)
    return step, GraphedIteration(step)


def in_step(shape: str, names: list[str], deadline: float) -> None:
    default = float8_mlp.FAST_BACKWARD
    built = {name: captured(shape, *VARIANTS[name]) for name in names}
    try:
        results = alternating_rounds({name: lambda g=graph: g for name, (_, graph) in built.items()},
                                     3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
    finally:
        for step, _ in built.values():
            step.close()
        float8_mlp.FAST_BACKWARD = default
    for reference in ("fp8", "all"):
        for line in summary(results, reference) if reference in results else ():
            print(shape, line, flush=True)


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for arg in cases_in_time(shapes, deadline, BUILD_S):
        shape, _, names = arg.partition(":")
        in_step(shape, names.split(",") if names else list(VARIANTS), deadline)


if __name__ == "__main__":
    main()
