#!/usr/bin/env bash
# GPU run 9 (session 3): issue 6's comparison in one run: stock eager, stock whole-model compiled
# and --fast on the default grid (the second call reuses the first call's stored rows).
RUN=${RUN:-run9}
source benchmarks/scripts/common.sh
L="python3 -m trainperf llama --backend CUDNN_ATTENTION --iters 10 --warmup 3 --db $RES/llama.db --quiet"
timeout 200 $L --fast --out "$RES/llama_fast" | tee "$RES/llama_fast.txt"
timeout 370 $L --compile off,on --fast --out "$RES/llama_all" | tee "$RES/llama_all.txt"
