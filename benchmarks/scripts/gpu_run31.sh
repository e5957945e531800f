#!/usr/bin/env bash
# GPU run 31 (session 6): the fused backward (triton-fa2-atomic) with every tile of its loop
# read through the TMA unit as well as reduced by it, so that a reduction's wait no longer drains
# cp.async loads: per-tile-shape kernel times, then against triton-fa2 and cuDNN at the three
# targets, then its GPU tests.
RUN=${RUN:-run31}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_kernel_configs.py
timeout 100 python3 $P 1 16 16384 64 "$RES/configs_reference.csv" dkdv-atomic > "$RES/configs_reference.txt" 2>&1
timeout 80 python3 $P 1 8 16384 128 "$RES/configs_d128.csv" dkdv-atomic > "$RES/configs_d128.txt" 2>&1
grep -h fastest "$RES"/configs_*.txt
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet --warmup 10 --reps 50"
I=sdpa-cudnn,triton-fa2,triton-fa2-atomic
timeout 120 $A --impl $I --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode bwd,fwd+bwd | tee "$RES/attention_reference.txt"
timeout 90 $A --impl $I --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode bwd,fwd+bwd | tee "$RES/attention_d128.txt"
timeout 50 $A --impl $I --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd | tee "$RES/attention_b8_s2048.txt"
TRAINPERF_TRITON_TUNE=0 timeout 140 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "atomic and real_sizes" 2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' | tee "$RES/pytest_gpu_atomic.txt"
