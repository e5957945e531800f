#!/usr/bin/env bash
# GPU run 64 (session 9): SM clock and power while triton-fa2 v5.6 and cuDNN run sustained at
# the three target shapes (4 alternating rounds of 200 calls each; NVML sampled every 10 ms).
RUN=${RUN:-run64}
source benchmarks/scripts/common.sh
for shape in "${TARGETS[@]}"; do
  timeout 120 python3 benchmarks/scripts/fa2_clocks.py $shape 4 200 2>&1 | tee -a "$RES/clocks.txt"
done
