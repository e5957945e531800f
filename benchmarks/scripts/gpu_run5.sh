#!/usr/bin/env bash
# GPU run 5 (session 2): the compiled baselines of issue 6, stock and --fast, at the ends of the grid.
RUN=${RUN:-run5}
source benchmarks/scripts/common.sh
timeout 540 python3 -m trainperf llama --backend CUDNN_ATTENTION --fast --compile on --batch-seq 1x16384,12x1024 \
  --iters 20 --warmup 5 --db "$RES/llama.db" --out "$RES/llama_compiled" --quiet | tee "$RES/llama_compiled.txt"
