#!/usr/bin/env bash
# GPU run 42 (session 6): the attention GPU tests, with the new head dim 40 shape (a descriptor box
# wider than the head: 64 columns over 40).
RUN=${RUN:-run42}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "real_sizes or ragged" 2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' \
  | tee "$RES/pytest_gpu_attention.txt"
