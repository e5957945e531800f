#!/usr/bin/env bash
# GPU run 16 (session 4): the fast step with and without the all-ones mask (a host sync per
# iteration), then two Inductor settings tried on it: coordinate-descent tuning of the fused
# kernels, and max-autotune GEMM templates; the no-host-sync GPU test.
RUN=${RUN:-run16}
source benchmarks/scripts/common.sh
L="python3 -m trainperf llama --backend CUDNN_ATTENTION --compile layers --loss chunked --iters 10 --warmup 3 --quiet"
timeout 240 $L --batch-seq 1x16384,24x768 --mask ones,none --db "$RES/llama.db" --out "$RES/llama_mask" \
  | tee "$RES/llama_mask.txt"
TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 timeout 200 $L --batch-seq 1x16384,24x768 --mask none \
  --db "$RES/llama_cdt.db" --out "$RES/llama_cdt" | tee "$RES/llama_cdt.txt"
TORCHINDUCTOR_MAX_AUTOTUNE=1 timeout 240 $L --batch-seq 24x768 --mask none \
  --db "$RES/llama_autotune.db" --out "$RES/llama_autotune" | tee "$RES/llama_autotune.txt"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_llama.py -k host 2>&1 | tail -3 | tee "$RES/gpu_test.txt"
