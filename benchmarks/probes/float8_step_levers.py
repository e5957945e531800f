"""Probe: does each lever of trainperf's float8 step pay in the step?
usage: PYTHONPATH=src python3 benchmarks/probes/float8_step_levers.py DEADLINE_EPOCH SHAPE[:VARIANT,...]...
(every variant where a shape names none)

`fp8-trainperf-all` at each shape as trainperf runs it (`all`), beside it with one lever taken
back at a time, and torchao's `fp8`, in one process:
- `all-float32`: the backward products accumulating in float32 (kernels/float8_mlp.py
  FAST_BACKWARD off), as torchao's do.
- `all-expanded`, `fp8-expanded`: K and V expanded to every query head before FlashAttention 4
  (`--kv-heads expanded`), so its backward writes dK and dV per query head instead of summing each
  group's in float32.
- `all-tuned`, `head-tuned`: `fp8-trainperf-all` and `fp8-trainperf-head` with their layers compiled
  with Inductor's coordinate-descent tuning (`--compile layers-tuned`), as torchao's `fp8` is;
  `head` is `fp8-trainperf-head` as trainperf runs it.
- `all-rope-apart`, `head-rope-apart`: RoPE after the q, k and v product, as transformers applies
  it: its backward writes the stacked bf16 gradient, which the product's backward then casts
  (trainperf rotates inside the product and casts the gradient through RoPE in one kernel:
  models/hf_llama.py ROPE_IN_QKV_PRODUCT, kernels/float8_linear.py float8_qkv_rope).
- `all-gu-bf16`, `head-gu-bf16`: the MLP's gate and up product written in bf16, which the SwiGLU
  kernels then read (trainperf has cuBLAS write it as e4m3: kernels/float8_mlp.py
  GATE_UP_IN_FLOAT8).
- `all-rope-inductor`: the product's rotation of q and k as transformers writes it, compiled by
  Inductor (trainperf rotates them in one kernel: models/hf_llama.py ROPE_KERNEL, kernels/
  float8_linear.py rope_qk).
- `all-norms-apart`: each decoder layer's norms and residual adds as transformers writes them,
  compiled by Inductor, the MLP's input then cast by a kernel of its own (trainperf adds, norms and
  casts before the MLP in one kernel, and takes each norm's backward with the residual's gradient
  in its own: models/hf_llama.py FLOAT8_NORMS, kernels/float8_norm.py).
- `all-state-apart`: each scale state's history, amaxes, scales and inverse scales as tensors of
  their own, which the compiled backward clones and copies back one by one (trainperf keeps them
  as views of one buffer: kernels/float8_mlp.py ScaleState).
- `all-scales-frozen`: the step captured without the small kernel that takes each cast's next
  scale from its history (kernels/float8_mlp.py `_next_scale_kernel`, about 200 launches an
  iteration), its scales left where the first iteration calibrated them: not a way to train, but
  the most that folding those launches into the casts could give.
Each step is captured once as a CUDA graph, as the suite runs it, and the variants take turns in
three rounds of 10 replays (core/ab_rounds.py): CUDA-event time, energy, clock and power (the peak
memory it prints is the replays' alone: each graph is captured before the rounds). Before its
capture each float8 step runs once with its products counted by how they accumulate and its casts
of the stacked gradient through RoPE counted, so a build that did not take its setting shows.
"""

import collections
import contextlib
import sys
import time
from collections.abc import Callable, Iterator

import torch

from trainperf.core.ab_rounds import cases_in_time, graphs_in_rounds, summary
from trainperf.kernels import float8_linear, float8_mlp
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

BUILD_S = 300  # the steps' first builds at a shape, before one is measured


def calls_seen(step: llama_sdpa.LlamaStep) -> dict[str, int]:
    """One iteration's trainperf float8 products by how they accumulate, and its casts of the q, k
    and v product's gradient that take RoPE's backward in."""
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


def with_attributes(attributes: dict[str, bool]) -> Callable[[llama_sdpa.LlamaStep], None]:
    """What sets `attributes` on every part of a step's model that has them, before it compiles:
    its float8 attention layers and its float8 MLPs' scale states."""
    def prepare(step: llama_sdpa.LlamaStep) -> None:
        for module in step.model.modules():
            for part in (module, getattr(module, "state", None)):
                for name, value in attributes.items():
                    if hasattr(part, name):
                        setattr(part, name, value)

    prepare.__name__ = ", ".join(f"{name} {value}" for name, value in attributes.items())
    return prepare


def states_apart(step: llama_sdpa.LlamaStep) -> None:
    """Each scale state of the step's model as four tensors of their own, not views of one buffer."""
    for module in step.model.modules():
        for state in vars(module).values():
            if isinstance(state, float8_mlp.ScaleState):
                state.hist, state.now, state.scale, state.inv = (
                    t.clone(memory_format=torch.contiguous_format)
                    for t in (state.hist, state.now, state.scale, state.inv))


def scales_frozen(step: llama_sdpa.LlamaStep) -> None:
    """Nothing to the model: the variant's capture runs without the next-scale kernel
    (`during_capture`)."""


@contextlib.contextmanager
def _no_next_scale_launches() -> Iterator[None]:
    kernel = float8_mlp._next_scale_kernel
    float8_mlp._next_scale_kernel = collections.defaultdict(lambda: lambda *args, **kwargs: None)
    try:
        yield
    finally:
        float8_mlp._next_scale_kernel = kernel


scales_frozen.during_capture = _no_next_scale_launches
EXPANDED = {"kv_heads": "expanded"}
TUNED = {"compile": "layers-tuned"}
ROPE_APART = with_attributes({"rope_in_product": False})  # the float8 attention layers' attributes
ROPE_INDUCTOR = with_attributes({"rope_kernel": False})
GU_BF16 = with_attributes({"gate_up_in_float8": False})  # the float8 MLPs' scale states' attribute
NORMS_APART = with_attributes({"float8_norms": False})  # the decoder layers' attribute
VARIANTS = {  # name: (recipe, fast backward, fields over the recipe's, what prepares the model)
    "fp8": ("fp8", True, {}, None),
    "fp8-expanded": ("fp8", True, EXPANDED, None),
    "all-float32": ("fp8-trainperf-all", False, {}, None),
    "all": ("fp8-trainperf-all", True, {}, None),
    "all-expanded": ("fp8-trainperf-all", True, EXPANDED, None),
    "all-tuned": ("fp8-trainperf-all", True, TUNED, None),
    "all-rope-apart": ("fp8-trainperf-all", True, {}, ROPE_APART),
    "all-rope-inductor": ("fp8-trainperf-all", True, {}, ROPE_INDUCTOR),
    "all-gu-bf16": ("fp8-trainperf-all", True, {}, GU_BF16),
    "all-state-apart": ("fp8-trainperf-all", True, {}, states_apart),
    "all-norms-apart": ("fp8-trainperf-all", True, {}, NORMS_APART),
    "all-scales-frozen": ("fp8-trainperf-all", True, {}, scales_frozen),
    "head": ("fp8-trainperf-head", True, {}, None),
    "head-tuned": ("fp8-trainperf-head", True, TUNED, None),
    "head-rope-apart": ("fp8-trainperf-head", True, {}, ROPE_APART),
    "head-gu-bf16": ("fp8-trainperf-head", True, {}, GU_BF16),
}


def captured(shape: str, recipe: str, fast: bool, fields: dict[str, str],
             prepare: Callable[[llama_sdpa.LlamaStep], None] | None
             ) -> tuple[llama_sdpa.LlamaStep, GraphedIteration]:
    float8_mlp.FAST_BACKWARD = fast
    t0 = time.time()
    step = llama_sdpa.recipe_step(recipe, *map(int, shape.split("x")), prepare=prepare, **fields)
    prepared = prepare.__name__ if prepare else ""
    print(f"{shape} {recipe} {fields or ''} fast backward {fast} {prepared}: built in "
          f"{time.time() - t0:.0f} s, calls {calls_seen(step)}", flush=True)
    with getattr(prepare, "during_capture", contextlib.nullcontext)():
        return step, GraphedIteration(step)


def in_step(shape: str, names: list[str], deadline: float) -> None:
    default = float8_mlp.FAST_BACKWARD
    built = {name: captured(shape, *VARIANTS[name]) for name in names}
    try:
        results = graphs_in_rounds(built, deadline)
    finally:
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
