#!/usr/bin/env bash
# GPU run 35 (session 6): triton-fa2's dK/dV and dQ kernels one after the other against side by
# side on two streams, at the three issue-3 shapes.
RUN=${RUN:-run35}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_concurrent_bwd.py
timeout 120 python3 $P 1 16 16384 64 2>&1 | tee "$RES/concurrent_reference.txt"
timeout 120 python3 $P 1 8 16384 128 2>&1 | tee "$RES/concurrent_d128.txt"
timeout 90 python3 $P 8 16 2048 64 2>&1 | tee "$RES/concurrent_b8_s2048.txt"
