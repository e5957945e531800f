"""Probe: which setups of `fast` capture as one CUDA graph. usage: python3 capture-probe.py
OPTIMIZER:BxN:LAYERS... ; each setup in its own process (a failed capture leaves the process's
CUDA generator unusable): choose_kv_mode, one eager iteration, then GraphedIteration and a replay;
prints ok with the eager and replayed loss, or the error's first line; output in capture-probe.txt.
"""

import subprocess
import sys

CHILD = """
import sys, torch
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration
opt, shape, layers = sys.argv[1].split(":")
b, n = map(int, shape.split("x"))
spec = llama_sdpa.setup_spec(llama_sdpa.recipe_setup("fast", "cuda"), "FA4", batch=b, seq=n,
                             optimizer=opt, layers=int(layers) or None)
step = llama_sdpa.LlamaStep(spec, torch.device("cuda"))
llama_sdpa.choose_kv_mode(step, spec.sdpa_backend)
eager = float(step())
try:
    replayed = float(GraphedIteration(step)())
    print(f"{sys.argv[1]}: ok, eager loss {eager:.5f}, replayed {replayed:.5f}", flush=True)
except Exception as exc:
    print(f"{sys.argv[1]}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
"""

for case in sys.argv[1:]:
    out = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, timeout=240)
    lines = [line for line in out.stdout.splitlines() if line.startswith(case)]
    print(lines[0] if lines else f"{case}: exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}",
          flush=True)
