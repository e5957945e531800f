#!/usr/bin/env bash
# GPU run 12 (session 3): each part of --fast on its own: per-layer compile with the stock loss,
# and the chunked loss without compile, at three shapes of the grid.
RUN=${RUN:-run12}
source benchmarks/scripts/common.sh
L="python3 -m trainperf llama --backend CUDNN_ATTENTION --batch-seq 1x16384,12x1024,24x768 --iters 10 --warmup 3"
timeout 150 $L --compile layers --db "$RES/llama.db" --out "$RES/llama_layers_only" --quiet | tee "$RES/llama_layers_only.txt"
timeout 120 $L --loss chunked --db "$RES/llama.db" --out "$RES/llama_chunked_only" --quiet | tee "$RES/llama_chunked_only.txt"
