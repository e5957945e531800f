#!/usr/bin/env bash
# GPU run 8 (session 3): --fast after the in-place head-weight gradient and the compiled final
# norm, beside stock eager; the stock compiled 24x768 case that run 7 ran out of time for; kernel
# profiles of the --fast step (ranges skip compiled modules now).
RUN=${RUN:-run8}
source benchmarks/scripts/common.sh
timeout 260 python3 -m trainperf llama --backend CUDNN_ATTENTION --fast --iters 10 --warmup 3 --db "$RES/llama.db" \
  --out "$RES/llama_fast" --quiet | tee "$RES/llama_fast.txt"
timeout 100 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile on --batch-seq 24x768 --iters 10 \
  --warmup 3 --db "$RES/llama.db" --out "$RES/llama_compiled_24x768" --quiet | tee "$RES/llama_compiled_24x768.txt"
for bs in 12x1024 1x16384; do
  timeout 80 python3 -m trainperf profile llama --batch-seq $bs --fast --out "$RES/profiles" \
    > "$RES/profile_llama_fast_$bs.txt" 2>&1; grep -A30 "top kernels" "$RES/profile_llama_fast_$bs.txt" | cut -c1-150
done
