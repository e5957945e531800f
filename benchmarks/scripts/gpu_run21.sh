#!/usr/bin/env bash
# GPU run 21 (session 4): triton-fa2 v4 (dP's product issued before the exponentials in both
# backward kernels) against cuDNN at the three targets; one-call kernel profile; bf16 tests.
RUN=${RUN:-run21}
source benchmarks/scripts/common.sh
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet --warmup 10 --reps 50"
I=sdpa-cudnn,triton-fa2
timeout 150 $A --impl $I --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode fwd,bwd,fwd+bwd | tee "$RES/attention_reference.txt"
timeout 120 $A --impl $I --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd+bwd | tee "$RES/attention_d128.txt"
timeout 60 $A --impl $I --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd | tee "$RES/attention_b8_s2048.txt"
timeout 60 python3 -m trainperf profile attention --impl triton-fa2 --batch 1 --heads 16 --seq 16384 --head-dim 64 \
  --out "$RES/profiles" > "$RES/profile_triton_fa2_reference.txt" 2>&1; grep -A9 "top kernels" "$RES/profile_triton_fa2_reference.txt" | cut -c1-140
TRAINPERF_TRITON_TUNE=0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "triton and not atomic" > "$RES/pytest_gpu_attention.txt" 2>&1; tail -3 "$RES/pytest_gpu_attention.txt"
