#!/usr/bin/env bash
# GPU run 3: the Llama-3.2-1B default grid across SDPA backends (20 timed iterations: device budget).
RUN=run3
source benchmarks/scripts/common.sh
timeout 420 python3 -m trainperf llama --db "$RES/llama.db" --out "$RES" --iters 20 --warmup 5 --quiet | tee "$RES/llama.txt"
