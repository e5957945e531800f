#!/usr/bin/env bash
# GPU run 41 (session 6): triton-fa2 v5.1 against cuDNN in alternating rounds at the three issue-3
# targets (a ratio that clock drift cannot tilt), with a gradient check of the autotuned kernels.
RUN=${RUN:-run41}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_vs_cudnn_rounds.py
for shape in "1 16 16384 64" "1 8 16384 128" "8 16 2048 64"; do
  timeout 150 python3 $P $shape 12 40 2>&1 | tee -a "$RES/rounds.txt"
done
