#!/usr/bin/env bash
# GPU run 15 (session 4): grouped-query attention into cuDNN natively (enable_gqa) or with K/V
# heads expanded, alone and inside trainperf's fastest step; a profile of that step at 24x768.
RUN=${RUN:-run15}
source benchmarks/scripts/common.sh
timeout 90 python3 benchmarks/scripts/gqa_sdpa.py 1x16384 2x8192 12x1024 24x768 | tee "$RES/gqa_sdpa.csv"
timeout 300 python3 -m trainperf llama --backend CUDNN_ATTENTION --batch-seq 1x16384,24x768 --compile layers \
  --loss chunked --kv-heads native,expanded --iters 10 --warmup 3 --db "$RES/llama.db" --out "$RES/llama_kv" \
  --quiet | tee "$RES/llama_kv.txt"
timeout 120 python3 -m trainperf profile llama --batch-seq 24x768 --fast --out "$RES/profiles" \
  | tee "$RES/profile_fast_24x768.txt"
