#!/usr/bin/env bash
# GPU run 11 (session 3): triton-fa2 with 8-warp 64-wide backward tiles at head dim 128 and the
# reference; the Llama tests on the GPU, verbose (run 10's test call ran out of time at 74/80).
RUN=${RUN:-run11}
source benchmarks/scripts/common.sh
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet"
timeout 150 $A --impl sdpa-cudnn,triton-fa2 --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd+bwd,bwd \
  --warmup 10 --reps 50 | tee "$RES/attention_d128.txt"
timeout 110 $A --impl sdpa-cudnn,triton-fa2 --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode fwd+bwd,bwd \
  --warmup 10 --reps 50 | tee "$RES/attention_reference.txt"
TRAINPERF_TRITON_TUNE=0 timeout 200 python3 -m pytest -v -p no:cacheprovider --durations=10 tests/test_llama.py \
  > "$RES/pytest_gpu_llama.txt" 2>&1; grep -E "PASS|FAIL|ERROR|passed|failed|slowest|s call" "$RES/pytest_gpu_llama.txt" | tail -40
