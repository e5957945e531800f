"""Probe: what does the float32 loss that transformers computes cost `stock` and `compile`?
transformers' causal-LM loss (and torchtitan's) casts the logits to float32 before the
cross-entropy; trainperf's steps hand PyTorch's cross-entropy the bf16 logits.
usage: PYTHONPATH=src python3 benchmarks/probes/loss_upcast.py DEADLINE_EPOCH SHAPE[:VARIANT,...]...

Per shape (e.g. 12x1024, or 1x16384:compile,compile+fp32 for some of the variants), `stock` and
`compile` on PyTorch's cuDNN attention, each with the
cross-entropy on the bf16 logits (as the recipes run) and on the logits cast to float32 (`+fp32`),
in three alternating rounds of 10 iterations: CUDA-event time, energy, clock and power, peak
memory; and each step's first loss.
"""

import sys
import time

import torch
import torch.nn.functional as F

from trainperf.core.ab_rounds import alternating_rounds, cases_in_time, summary
from trainperf.workloads import llama_sdpa

VARIANTS = ("stock", "stock+fp32", "compile", "compile+fp32")


def float32_loss(step: llama_sdpa.LlamaStep) -> None:
    """The cross-entropy on the logits cast to float32, compiled with the model where it was."""
    def forward_and_loss(inputs: dict[str, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        logits = step.forward(**inputs).logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    compiled = step.loss_of != step.forward_and_loss  # bound methods: equal, never the same object
    step.loss_of = torch.compile(forward_and_loss) if compiled else forward_and_loss


def built(shape: str, variant: str) -> llama_sdpa.LlamaStep:
    t0 = time.time()
    recipe, _, upcast = variant.partition("+")
    prepare = float32_loss if upcast else None
    step = llama_sdpa.recipe_step(recipe, *map(int, shape.split("x")), prepare=prepare)
    print(f"{shape} {variant}: first loss {step().item():.5f}, built in {time.time() - t0:.0f} s", flush=True)
    step.model.zero_grad(set_to_none=True)  # the steps waiting their turn hold their weights only
    return step


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for arg in cases_in_time(shapes, deadline, 300):
        shape, _, named = arg.partition(":")
        steps = {v: built(shape, v) for v in (named.split(",") if named else VARIANTS)}
        results = alternating_rounds({v: (lambda s=s: s) for v, s in steps.items()}, 3, 10,
                                     torch.device("cuda"), deadline, say=lambda line: print(line, flush=True))
        for line in summary(results, "compile"):
            print(shape, line, flush=True)
        del steps


if __name__ == "__main__":
    main()
