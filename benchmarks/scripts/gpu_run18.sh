#!/usr/bin/env bash
# GPU run 18 (session 4): the #6 confirmation at the three short-sequence shapes of the default
# grid: stock cuDNN eager, stock cuDNN whole-model compiled and --fast, in one run, 20 iterations;
# then a full-kernel profile of the fast step at 24x768.
RUN=${RUN:-run18}
source benchmarks/scripts/common.sh
timeout 420 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile off,on --fast \
  --batch-seq 6x2048,12x1024,24x768 --iters 20 --warmup 5 --db "$RES/llama.db" --out "$RES/llama_short" --quiet \
  | tee "$RES/llama_short.txt"
timeout 100 python3 -m trainperf profile llama --batch-seq 24x768 --fast --out "$RES/profiles" \
  | tee "$RES/profile_fast_24x768.txt"
