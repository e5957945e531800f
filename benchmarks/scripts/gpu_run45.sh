#!/usr/bin/env bash
# GPU run 45 (session 6): the attention GPU tests after the review fold of the descriptor helpers
# (same instructions for sm_90, loop bodies identical; checked on the GPU all the same).
RUN=${RUN:-run45}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "real_sizes or ragged" 2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' \
  | tee "$RES/pytest_gpu_attention.txt"
