#!/usr/bin/env bash
# GPU run 23 (session 4): triton-fa2-atomic with dQ reduced by the TMA unit (one bulk reduction
# per tile instead of element-wise atomics): its GPU tests first, then against triton-fa2 and
# cuDNN at the three targets, and a one-call kernel profile.
RUN=${RUN:-run23}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "atomic" 2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' | tee "$RES/pytest_gpu_atomic.txt"
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet --warmup 10 --reps 50"
I=sdpa-cudnn,triton-fa2,triton-fa2-atomic
timeout 150 $A --impl $I --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode bwd,fwd+bwd | tee "$RES/attention_reference.txt"
timeout 120 $A --impl $I --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd+bwd | tee "$RES/attention_d128.txt"
timeout 60 $A --impl $I --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd | tee "$RES/attention_b8_s2048.txt"
timeout 60 python3 -m trainperf profile attention --impl triton-fa2-atomic --batch 1 --heads 16 --seq 16384 \
  --head-dim 64 --out "$RES/profiles" > "$RES/profile_triton_fa2_atomic_reference.txt" 2>&1
grep -a -A9 "top kernels" "$RES/profile_triton_fa2_atomic_reference.txt" | cut -c1-140
