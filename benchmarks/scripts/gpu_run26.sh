#!/usr/bin/env bash
# GPU run 26 (session 5): where triton-fa2's kernels stand per tile shape (registers, spills,
# shared memory, programs per SM, time) at the three issue-3 shapes, and forward/backward apart
# against cuDNN at head dim 128, to pick what to change next.
RUN=${RUN:-run26}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_kernel_configs.py
timeout 170 python3 $P 1 16 16384 64 "$RES/configs_reference.csv" > "$RES/configs_reference.txt" 2>&1
timeout 150 python3 $P 1 8 16384 128 "$RES/configs_d128.csv" > "$RES/configs_d128.txt" 2>&1
timeout 90 python3 $P 8 16 2048 64 "$RES/configs_b8_s2048.csv" > "$RES/configs_b8_s2048.txt" 2>&1
grep -h fastest "$RES"/configs_*.txt
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet --warmup 10 --reps 50"
timeout 120 $A --impl sdpa-cudnn,triton-fa2 --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd,bwd,fwd+bwd \
  | tee "$RES/attention_d128.txt"
