#!/usr/bin/env bash
# GPU run 17 (session 4): the cross-entropy kernel's autotuning candidates on a real logits block
# and its bf16 tests, then the #6 confirmation at the three long-sequence shapes of the default
# grid: stock cuDNN eager, stock cuDNN whole-model compiled and --fast, in one run, 20 iterations.
RUN=${RUN:-run17}
source benchmarks/scripts/common.sh
timeout 60 python3 benchmarks/scripts/ce_kernel_configs.py | tee "$RES/ce_kernel_configs.csv"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "cross_entropy or chunked" 2>&1 \
  | tail -3 | tee "$RES/gpu_test.txt"
timeout 420 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile off,on --fast \
  --batch-seq 1x16384,2x8192,3x4096 --iters 20 --warmup 5 --db "$RES/llama.db" --out "$RES/llama_long" --quiet \
  | tee "$RES/llama_long.txt"
