#!/usr/bin/env bash
# GPU run 7 (session 3): the stock whole-model compiled baseline on the default grid (a fresh
# compile per shape), and the per-layer compiled step with trainperf's Triton norm and SwiGLU.
RUN=${RUN:-run7}
source benchmarks/scripts/common.sh
timeout 330 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile on --iters 10 --warmup 3 \
  --db "$RES/llama.db" --out "$RES/llama_compiled" --quiet | tee "$RES/llama_compiled.txt"
timeout 230 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile layers --norm triton --swiglu triton \
  --loss chunked --iters 10 --warmup 3 --db "$RES/llama.db" --out "$RES/llama_layers_triton" --quiet \
  | tee "$RES/llama_layers_triton.txt"
