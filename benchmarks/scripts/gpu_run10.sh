#!/usr/bin/env bash
# GPU run 10 (session 3): triton-fa2 v3 at head dim 128 and at batch 8 / seq 2048 (more reps: run 6
# ran out of time at d128 and was noisy at B8), then the GPU tests (bf16 kernels, Llama swaps).
RUN=${RUN:-run10}
source benchmarks/scripts/common.sh
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet"
timeout 100 $A --impl sdpa-cudnn,triton-fa2 --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd,fwd,bwd \
  --warmup 10 --reps 50 | tee "$RES/attention_b8_s2048.txt"
timeout 150 $A --impl sdpa-cudnn,triton-fa2 --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd+bwd,fwd,bwd \
  --warmup 10 --reps 50 | tee "$RES/attention_d128.txt"
TRAINPERF_TRITON_TUNE=0 timeout 320 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  tests/test_kernels.py tests/test_llama.py > "$RES/pytest_gpu.txt" 2>&1; tail -5 "$RES/pytest_gpu.txt"
