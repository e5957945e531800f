#!/usr/bin/env bash
# GPU run 56 (session 8): v5.5's launch order against the one before, end to end: cuDNN and
# triton-fa2 with head groups of 1 (v5.4's order) and 4 (v5.5) in the same alternating rounds
# (16 rounds of 40 calls) at the three target shapes.
RUN=${RUN:-run56}
source benchmarks/scripts/common.sh
for shape in "${TARGETS[@]}"; do
  timeout 180 python3 benchmarks/scripts/fa2_vs_cudnn_rounds.py $shape 16 40 g1,g4 2>&1 | tee -a "$RES/rounds_groups.txt"
done
