#!/usr/bin/env bash
# GPU run 33 (session 6): triton-fa2 v5 (the dK/dV kernel reads its tiles through the TMA unit):
# its dK/dV tile shapes, capped-register shapes among them, then against every SDPA backend at
# the reference and against cuDNN at the other two targets, then the attention GPU tests.
RUN=${RUN:-run33}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_kernel_configs.py
timeout 120 python3 $P 1 16 16384 64 "$RES/configs_reference.csv" dkdv > "$RES/configs_reference.txt" 2>&1
grep -h fastest "$RES"/configs_*.txt
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet --warmup 10 --reps 50"
timeout 150 $A --impl sdpa-cudnn,sdpa-flash,sdpa-efficient,triton-fa2,triton-fa2-atomic --batch 1 --heads 16 \
  --seq 16384 --head-dim 64 --mode fwd,bwd,fwd+bwd | tee "$RES/attention_reference.txt"
I=sdpa-cudnn,triton-fa2,triton-fa2-atomic
timeout 90 $A --impl $I --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd,bwd,fwd+bwd | tee "$RES/attention_d128.txt"
timeout 50 $A --impl $I --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd | tee "$RES/attention_b8_s2048.txt"
TRAINPERF_TRITON_TUNE=0 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' | tee "$RES/pytest_gpu_attention.txt"
