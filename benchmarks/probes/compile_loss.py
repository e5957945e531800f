"""Probe: is the whole-model `compile` recipe faster with its loss compiled too? The recipe compiles
the model and computes the cross-entropy eagerly from its logits (PyTorch's softmax kernels). A
user who hands transformers the labels gets the loss inside the compiled forward, where Inductor
fuses it. usage: PYTHONPATH=src python3 benchmarks/probes/compile_loss.py DEADLINE_EPOCH SHAPE...

Per shape (e.g. 6x2048) two steps of the `compile` recipe on PyTorch's cuDNN attention: `model`
(the recipe as it is) and `model+loss` (one compiled function of the model's forward and the
cross-entropy against the same targets), each run eagerly as the suite times `compile`, in three
alternating rounds of 10 iterations: CUDA-event time, energy, clock and power, peak memory.
"""

import sys
import time

import torch
import torch.nn.functional as F

from trainperf.core.ab_rounds import alternating_rounds, summary
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step import Phase, no_phase

VARIANTS = ("model", "model+loss")


def loss_compiled_with_model(step: llama_sdpa.LlamaStep) -> None:
    """The step's forward and loss as one compiled function."""
    model = step.model

    def forward_and_loss(inputs: dict[str, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        logits = model(**inputs).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    compiled = torch.compile(forward_and_loss)

    def forward_pass(phase: Phase = no_phase) -> torch.Tensor:
        with phase("forward"):
            return compiled(step.inputs, step.targets)

    step.forward_pass = forward_pass


def built(shape: str, variant: str) -> llama_sdpa.LlamaStep:
    t0 = time.time()
    prepare = loss_compiled_with_model if variant == "model+loss" else None
    step = llama_sdpa.recipe_step("compile", *map(int, shape.split("x")), prepare=prepare)
    print(f"{shape} {variant}: first loss {step().item():.5f}, built in {time.time() - t0:.0f} s", flush=True)
    return step


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in shapes:
        if time.time() > deadline - 240:
            print("deadline: skipping", shape, flush=True)
            continue
        steps = {v: built(shape, v) for v in VARIANTS}
        results = alternating_rounds({v: (lambda s=s: s) for v, s in steps.items()}, 3, 10,
                                     torch.device("cuda"), deadline, say=lambda line: print(line, flush=True))
        for line in summary(results, VARIANTS[0]):
            print(shape, line, flush=True)
        del steps


if __name__ == "__main__":
    main()
