#!/usr/bin/env bash
# GPU run 7 (session 3): the stock whole-model compiled baseline on the default grid (a fresh
# compile per shape), the per-layer compiled step with trainperf's Triton norm and SwiGLU, and a
# kernel profile of the --fast step at 1x16384.
RUN=${RUN:-run7}
source benchmarks/scripts/common.sh
timeout 300 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile on --iters 10 --warmup 3 \
  --db "$RES/llama.db" --out "$RES/llama_compiled" --quiet | tee "$RES/llama_compiled.txt"
timeout 150 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile layers --norm triton --swiglu triton \
  --loss chunked --iters 10 --warmup 3 --db "$RES/llama.db" --out "$RES/llama_layers_triton" --quiet \
  | tee "$RES/llama_layers_triton.txt"
timeout 90 python3 -m trainperf profile llama --batch-seq 1x16384 --fast --out "$RES/profiles" \
  > "$RES/profile_llama_fast_1x16384.txt" 2>&1; tail -45 "$RES/profile_llama_fast_1x16384.txt"
