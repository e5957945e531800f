"""Probe: is the whole-model `compile` recipe faster with its loss compiled too? Compiling only the
model leaves the cross-entropy eager on its logits (PyTorch's softmax kernels); a user who hands
transformers the labels gets the loss inside the compiled forward, where Inductor fuses it, as the
recipe now does. usage: PYTHONPATH=src python3 benchmarks/probes/compile_loss.py DEADLINE_EPOCH SHAPE...

Per shape (e.g. 6x2048) two steps of the `compile` recipe on PyTorch's cuDNN attention: `model`
(the model compiled, the loss eager after it) and `model+loss` (the recipe: one compiled function
of the model's forward and the cross-entropy), each run eagerly as the suite times `compile`, in
three alternating rounds of 10 iterations: CUDA-event time, energy, clock and power, peak memory.
"""

import sys
import time

import torch

from trainperf.core.ab_rounds import alternating_rounds, cases_in_time, summary
from trainperf.workloads import llama_sdpa

VARIANTS = ("model", "model+loss")


def loss_outside_the_graph(step: llama_sdpa.LlamaStep) -> None:
    """Only the model compiled; the cross-entropy runs eagerly on its logits."""
    step.forward = torch.compile(step.model)
    step.loss_of = step.forward_and_loss


def built(shape: str, variant: str) -> llama_sdpa.LlamaStep:
    t0 = time.time()
    prepare = loss_outside_the_graph if variant == "model" else None
    step = llama_sdpa.recipe_step("compile", *map(int, shape.split("x")), prepare=prepare)
    print(f"{shape} {variant}: first loss {step().item():.5f}, built in {time.time() - t0:.0f} s", flush=True)
    return step


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in cases_in_time(shapes, deadline, 240):
        steps = {v: built(shape, v) for v in VARIANTS}
        results = alternating_rounds({v: (lambda s=s: s) for v, s in steps.items()}, 3, 10,
                                     torch.device("cuda"), deadline, say=lambda line: print(line, flush=True))
        for line in summary(results, VARIANTS[0]):
            print(shape, line, flush=True)
        del steps


if __name__ == "__main__":
    main()
