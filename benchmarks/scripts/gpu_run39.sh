#!/usr/bin/env bash
# GPU run 39 (session 6): triton-fa2 v5.1 (the 2-stage 64x64 dK/dV shape joins the autotuning list)
# against cuDNN at head dim 128 (twice, first and last), the reference and B8 x 2048.
RUN=${RUN:-run39}
source benchmarks/scripts/common.sh
A="python3 -m trainperf attention --db $RES/attention.db --dtype bf16 --causal on --quiet --warmup 10 --reps 100"
I=sdpa-cudnn,triton-fa2
timeout 120 $A --out $RES/plots --impl $I --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd,bwd,fwd+bwd \
  | tee "$RES/attention_d128.txt"
timeout 120 $A --out $RES/plots --impl $I --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode fwd,bwd,fwd+bwd \
  | tee "$RES/attention_reference.txt"
timeout 60 $A --out $RES/plots --impl $I --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd \
  | tee "$RES/attention_b8_s2048.txt"
timeout 60 $A --rerun --out $RES/plots_repeat --impl $I --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd+bwd \
  | tee "$RES/attention_d128_repeat.txt"
