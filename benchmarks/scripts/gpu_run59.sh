#!/usr/bin/env bash
# GPU run 59 (session 8): issue 3's benchmark for triton-fa2 v5.5 and cuDNN (the fastest fused
# backend from 4096 tokens on in run 47), at the lengths where calls are GPU-bound:
#   trainperf attention --impl sdpa-cudnn,triton-fa2 --head-dim 16,32,64,128 --seq 4096,8192,16384
#     --batch 8 --heads 16 --dtype bf16 --causal on --mode fwd,bwd,fwd+bwd
RUN=${RUN:-run59}
source benchmarks/scripts/common.sh
timeout 540 python3 -m trainperf attention --db "$RES/attention.db" --out "$RES/out" --batch 8 --heads 16 \
  --dtype bf16 --causal on --mode fwd,bwd,fwd+bwd --head-dim 16,32,64,128 --seq 4096,8192,16384 \
  --impl sdpa-cudnn,triton-fa2 --quiet > "$RES/attention.txt" 2>&1
echo "exit $?"
tail -3 "$RES/attention.txt"
