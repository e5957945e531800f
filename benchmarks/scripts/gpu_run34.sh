#!/usr/bin/env bash
# GPU run 34 (session 6): what run 33 left open. Head dim 128 (it ran out of time there), B8 x 2048
# with four times the repetitions (run 33's triton-fa2 median sat far above its minimum), a
# kernel profile at B8 x 2048 (GPU time per kernel, apart from launch gaps), the GPU tests.
RUN=${RUN:-run34}
source benchmarks/scripts/common.sh
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet --warmup 10"
I=sdpa-cudnn,triton-fa2,triton-fa2-atomic
timeout 150 $A --reps 50 --impl $I --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd,bwd,fwd+bwd \
  | tee "$RES/attention_d128.txt"
timeout 80 $A --reps 200 --impl $I --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd,bwd,fwd+bwd \
  | tee "$RES/attention_b8_s2048.txt"
for impl in triton-fa2 sdpa-cudnn; do
  timeout 60 python3 -m trainperf profile attention --impl $impl --batch 8 --heads 16 --seq 2048 --head-dim 64 \
    --steps 5 --out "$RES/profiles_$impl" > "$RES/profile_${impl}_b8_s2048.txt" 2>&1
  grep -a -A12 "top kernels" "$RES/profile_${impl}_b8_s2048.txt" | cut -c1-150
done
gpu_attention_tests 200 "real_sizes or ragged"
