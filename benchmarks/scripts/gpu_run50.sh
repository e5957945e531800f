#!/usr/bin/env bash
# GPU run 50 (session 7): v5.4 (the 64×128 dQ shape in the autotuning list) against cuDNN in
# alternating rounds at the three target shapes (12 rounds of 40 calls; first a check of the
# autotuned kernels' gradients against cuDNN's), as run 44 did for v5.2.
RUN=${RUN:-run50}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_vs_cudnn_rounds.py
for shape in "1 16 16384 64" "1 8 16384 128" "8 16 2048 64"; do
  timeout 150 python3 $P $shape 12 40 2>&1 | tee -a "$RES/rounds.txt"
done
