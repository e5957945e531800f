#!/usr/bin/env bash
# GPU run 25 (session 4): after the review fold (shared row mask/store in the attention kernels,
# shared autotuning candidates): triton-fa2 and triton-fa2-atomic real-size tests, the kernel
# tests in bf16, and one reference timing against cuDNN to see nothing moved.
RUN=${RUN:-run25}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  tests/test_kernels.py -k "real_sizes or cross_entropy or chunked" 2>&1 | tail -3 \
  | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' | tee "$RES/pytest_gpu.txt"
timeout 120 python3 -m trainperf attention --db "$RES/attention.db" --out "$RES/plots" --dtype bf16 --causal on \
  --quiet --warmup 10 --reps 50 --impl sdpa-cudnn,triton-fa2 --batch 1 --heads 16 --seq 16384 --head-dim 64 \
  --mode fwd+bwd | tee "$RES/attention_reference.txt"
