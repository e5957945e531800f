"""Probe: the fastest step with its loss and attention settings changed one at a time, at the shapes
where its lead is smallest. usage: PYTHONPATH=src python3 benchmarks/probes/fast_step_levers.py
DEADLINE_EPOCH SHAPE...

Per shape the `fast` step is built once (each decoder layer compiled, FA4, quack's MLP, the
chunked loss) and captured as a CUDA graph once per variant, as the suite runs it; the variants
take turns in three rounds of 10 replays: CUDA-event time, energy, clock and power (GpuMonitor),
and the capture's peak memory.
- `now`: the step as trainperf runs it.
- `rows2048`, `rows4096`: logits blocks of 2,048 or 4,096 rows instead of the default 8,192 (more
  read-modify-writes of the head-weight gradient, a quarter or half of the block's memory).
- `foreach-scale`: the chunked loss's backward scales its stored gradients in one
  `_foreach_mul_` pass even when the incoming gradient is 1, instead of the kernel that skips it.
- `dqswap`: FA4's Hopper backward with dQ's MMA swapped (BwdConfig 128x128, dQ_swapAB).
- `kv-stacked`: a second `fast` step whose key and value projections are one Linear (1,024 rows
  instead of two of 512: one GEMM each for the forward, the input gradient and the weight
  gradient), built only where the deadline leaves time for a second build.
"""

import functools
import sys
import time
import types

import torch
from flash_attn.cute import interface as fa

from trainperf.core.ab_rounds import alternating_rounds, cases_in_time, summary
from trainperf.kernels import chunked_loss
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 180  # the longest a step's first build is expected to take, before one is measured
ROUNDS_S = 90  # three rounds of ten replays for every variant, their graphs captured
DEFAULT_BWD = fa._tile_size_bwd_sm90
DQSWAP = fa.BwdConfig(128, 128, 2, 2, 2, True, False, True, 1, 2, 2)


def foreach_backward(ctx, *grads):  # noqa: ANN001, ANN002, ANN201
    """The loss's backward as off the GPU: one `_foreach_mul_` pass whatever the incoming gradient."""
    ctx.fused = False
    return chunked_loss._backward(ctx, *grads)


def use_loss_backward(foreach: bool) -> None:
    chunked_loss.chunked_loss_op.register_autograd(foreach_backward if foreach else chunked_loss._backward,
                                                   setup_context=chunked_loss._setup)


VARIANTS = {  # name: (rows per logits block, None for the default; foreach scaling; dQ swap)
    "now": (None, False, False),
    "rows2048": (2048, False, False),
    "rows4096": (4096, False, False),
    "foreach-scale": (None, True, False),
    "dqswap": (None, False, True),
}


def variant(step: llama_sdpa.LlamaStep, rows: int | None, foreach: bool, dqswap: bool):  # noqa: ANN201
    """The maker of one variant: sets the step's loss and FA4's backward tile, captures the graph."""
    def make() -> GraphedIteration:
        step.hidden_loss = functools.partial(chunked_loss.chunked_lm_loss, chunk=rows)
        use_loss_backward(foreach)
        fa._tile_size_bwd_sm90 = (lambda *a, **k: DQSWAP) if dqswap else DEFAULT_BWD
        return GraphedIteration(step)
    return make


def stack_kv(step: llama_sdpa.LlamaStep) -> None:
    """Give every attention layer one `kv_proj` (key and value weights stacked) in place of k_proj
    and v_proj, and a forward that splits its output; the optimizer then takes the new weights."""
    for module in step.model.modules():
        if all(hasattr(module, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
            k, v = module.k_proj, module.v_proj
            module.kv_proj = torch.nn.Linear(k.in_features, k.out_features + v.out_features, bias=False,
                                             device=k.weight.device, dtype=k.weight.dtype)
            with torch.no_grad():
                module.kv_proj.weight.copy_(torch.cat([k.weight, v.weight]))
            module.kv_sizes = [k.out_features, v.out_features]
            del module.k_proj, module.v_proj
            module.forward = types.MethodType(_kv_attention_forward, module)
    step.opt = torch.optim.SGD(step.model.parameters(), lr=1e-6)


def _kv_attention_forward(self, hidden_states, position_embeddings, attention_mask=None,  # noqa: ANN001, ANN202
                          past_key_values=None, **kwargs):  # noqa: ANN001, ANN003
    """transformers' LlamaAttention.forward for training with k and v from one GEMM; RoPE and the
    attention are looked up at call time, as its own forward does."""
    from transformers.models.llama import modeling_llama

    tokens = hidden_states.shape[:-1]
    q = self.q_proj(hidden_states).view(*tokens, -1, self.head_dim).transpose(1, 2)
    k, v = (t.view(*tokens, -1, self.head_dim).transpose(1, 2)
            for t in self.kv_proj(hidden_states).split(self.kv_sizes, dim=-1))
    q, k = modeling_llama.apply_rotary_pos_emb(q, k, *position_embeddings)
    attention = modeling_llama.ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
    out, weights = attention(self, q, k, v, attention_mask, scaling=self.scaling, dropout=0.0, **kwargs)
    return self.o_proj(out.reshape(*tokens, -1).contiguous()), weights


def built(shape: str, prepare=None) -> tuple[llama_sdpa.LlamaStep, float]:  # noqa: ANN001
    """The fast step at `shape`, run once (by recipe_step), and the seconds its build took."""
    t0 = time.time()
    step = llama_sdpa.recipe_step("fast", *map(int, shape.split("x")), prepare=prepare)
    took = time.time() - t0
    swaps = ", ".join(step.swaps) + " kv-stacked" * bool(prepare)
    print(f"{shape} {swaps}: built in {took:.0f} s", flush=True)
    return step, took


def in_step(shape: str, deadline: float) -> None:
    step, took = built(shape)
    steps = [step]
    makers = {name: variant(step, *settings) for name, settings in VARIANTS.items()}
    if time.time() + 1.2 * took + ROUNDS_S < deadline:  # the second build costs about what the first did
        steps.append(built(shape, prepare=stack_kv)[0])
        makers["kv-stacked"] = variant(steps[1], *VARIANTS["now"])
    try:
        results = alternating_rounds(makers, 3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
    finally:
        use_loss_backward(False)
        fa._tile_size_bwd_sm90 = DEFAULT_BWD
        for step in steps:
            step.close()
    for line in summary(results, "now"):
        print(shape, line, flush=True)


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in cases_in_time(shapes, deadline, BUILD_S):  # time left to build its step (up to 3 minutes)
        in_step(shape, deadline)


if __name__ == "__main__":
    main()
