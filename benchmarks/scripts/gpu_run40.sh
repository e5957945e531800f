#!/usr/bin/env bash
# GPU run 40 (session 6): where a small triton-fa2 call's host time goes (cProfile over 300
# forward + backward calls at B1 H16 N1024 d64, after warm-up).
RUN=${RUN:-run40}
source benchmarks/scripts/common.sh
timeout 120 python3 - <<'PY' 2>&1 | tee "$RES/host_profile.txt"
import cProfile, pstats, torch
from trainperf.attention.flash_triton import flash_attention_triton
q, k, v = (torch.randn(1, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
dout = torch.randn_like(q)
def step():
    flash_attention_triton(q, k, v, causal=True).backward(dout)
for _ in range(20):
    step()
torch.cuda.synchronize()
prof = cProfile.Profile()
prof.enable()
for _ in range(300):
    step()
torch.cuda.synchronize()
prof.disable()
stats = pstats.Stats(prof)
stats.sort_stats("cumulative").print_stats(35)
stats.sort_stats("tottime").print_stats(25)
PY
sed -i "s|/opt/[^ ]*site-packages/|<site-packages>/|g; s|$PWD/||g" "$RES/host_profile.txt"
