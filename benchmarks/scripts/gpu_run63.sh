#!/usr/bin/env bash
# GPU run 63 (session 9): where the two-kernel backward (triton-fa2-atomic: 5 matrix products,
# dQ by TMA reductions) stands since v5.5-v5.6, against triton-fa2 and cuDNN in the same
# alternating rounds (12 × 40 calls) at the three target shapes; clocks and power read after.
RUN=${RUN:-run63}
source benchmarks/scripts/common.sh
for shape in "${TARGETS[@]}"; do
  rounds rounds_atomic.txt 140 12 direct,atomic "$shape"
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a "$RES/rounds_atomic.txt"
done
