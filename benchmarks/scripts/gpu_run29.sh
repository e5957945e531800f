#!/usr/bin/env bash
# GPU run 29 (session 5): does the dQ kernel's loop (three products, one exponential pass)
# compile and gain with Triton's warp specialisation on Hopper? Reference shape and head dim 128.
RUN=${RUN:-run29}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_warp_specialized.py
timeout 200 python3 $P 1 8 16384 128 dq 2>&1 | grep -v Warning | tee "$RES/ws_dq_d128.txt"
timeout 200 python3 $P 1 16 16384 64 dq 2>&1 | grep -v Warning | tee "$RES/ws_dq_reference.txt"
