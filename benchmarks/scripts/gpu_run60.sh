#!/usr/bin/env bash
# GPU run 60 (session 9): v5.6 (D computed in the dQ kernel, which runs before the dK/dV kernel;
# one launch fewer) against v5.5 (BASELINE: its flash_triton.py, commit 91fe3ae) and cuDNN in the
# same alternating rounds (12 × 40 calls) at the three target shapes and at B1 H16 N1024 d64
# (host-bound).
RUN=${RUN:-run60}
source benchmarks/scripts/common.sh
for shape in "${TARGETS[@]}" "1 16 1024 64"; do
  timeout 140 python3 benchmarks/scripts/fa2_vs_cudnn_rounds.py $shape 12 40 direct,baseline 2>&1 | tee -a "$RES/rounds_v56.txt"
done
