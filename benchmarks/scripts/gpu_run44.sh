#!/usr/bin/env bash
# GPU run 44 (session 6): triton-fa2 v5.2 (the dQ kernel also reads K and V through the TMA unit):
# the attention GPU tests, then alternating rounds against cuDNN at the three issue-3 targets.
RUN=${RUN:-run44}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "real_sizes or ragged" 2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' \
  | tee "$RES/pytest_gpu_attention.txt"
P=benchmarks/scripts/fa2_vs_cudnn_rounds.py
for shape in "1 16 16384 64" "1 8 16384 128" "8 16 2048 64"; do
  timeout 120 python3 $P $shape 12 40 2>&1 | tee -a "$RES/rounds.txt"
done
