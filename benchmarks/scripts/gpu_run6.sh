#!/usr/bin/env bash
# GPU run 6 (session 3): Llama stock eager vs --fast (per-layer compile + chunked loss) on the
# default grid; triton-fa2 v3 against cuDNN at the three attention targets.
RUN=${RUN:-run6}
source benchmarks/scripts/common.sh
timeout 330 python3 -m trainperf llama --backend CUDNN_ATTENTION --fast --iters 10 --warmup 3 --db "$RES/llama.db" \
  --out "$RES/llama_fast" --quiet | tee "$RES/llama_fast.txt"
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet"
IMPLS=sdpa-cudnn,sdpa-flash,triton-fa2
timeout 120 $A --impl $IMPLS --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode fwd+bwd,fwd,bwd \
  | tee "$RES/attention_reference.txt"
timeout 50 $A --impl $IMPLS --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd+bwd | tee "$RES/attention_d128.txt"
timeout 50 $A --impl $IMPLS --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd | tee "$RES/attention_b8_s2048.txt"
