#!/usr/bin/env bash
# GPU run 22 (session 4): --norm fused and cudnn on the Llama step (eager, stock loss) beside the
# stock norm, and the norm-swap tests on the GPU.
RUN=${RUN:-run22}
source benchmarks/scripts/common.sh
L="python3 -m trainperf llama --backend CUDNN_ATTENTION --batch-seq 1x16384,12x1024 --iters 10 --warmup 3 --db $RES/llama.db --quiet"
for norm in torch fused triton cudnn; do
  timeout 120 $L --norm $norm --out "$RES/llama_norm_$norm" | tee "$RES/llama_norm_$norm.txt"
done
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_llama.py -k "norm or swaps" 2>&1 | tail -3 \
  | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' | tee "$RES/pytest_gpu.txt"
