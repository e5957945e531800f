"""Probe: which host calls launch the copies and eager adds in `fast`'s step.
usage: python3 copy-probe.py SHAPE

Profiles one iteration of the `fast` recipe (after warm-up) with shapes and Python stacks, and
lists every aten op that launched an elementwise copy, add or mul kernel: calls, input shapes,
CUDA time and the innermost Python frames; output in copy-probe.txt.
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from trainperf.workloads import llama_sdpa

OPS = ("aten::copy_", "aten::add", "aten::add_", "aten::mul_", "aten::mul", "aten::clone",
       "aten::contiguous", "aten::_foreach_mul_", "aten::cat")


def main() -> None:
    batch, seq = map(int, sys.argv[1].split("x"))
    spec = llama_sdpa.setup_spec(llama_sdpa.recipe_setup("fast", "cuda"), "CUDNN_ATTENTION",
                                 batch=batch, seq=seq)
    step = llama_sdpa.LlamaStep(spec, torch.device("cuda"))
    llama_sdpa.choose_kv_mode(step, spec.sdpa_backend)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=True) as prof:
        step()
        torch.cuda.synchronize()
    by_shape = prof.key_averages(group_by_input_shape=True)
    print("== ops by input shape (device time > 0)")
    for e in sorted(by_shape, key=lambda e: -e.device_time_total):
        if e.key in OPS and e.device_time_total > 0:
            print(f"{e.key:22s} n={e.count:3d} {e.device_time_total / 1e3:8.3f} ms  {e.input_shapes}")
    print("== ops by stack")
    for e in sorted(prof.key_averages(group_by_stack_n=12), key=lambda e: -e.device_time_total):
        if e.key in OPS and e.device_time_total > 0:
            frames = [f for f in e.stack if "torch/" not in f or "_library" in f][:6]
            print(f"{e.key:22s} n={e.count:3d} {e.device_time_total / 1e3:8.3f} ms")
            for f in frames:
                print(f"      {f}")


if __name__ == "__main__":
    main()
