#!/usr/bin/env bash
# GPU run 24 (session 4): triton-fa2's real-size bf16/fp16 tests on the final tree (run 21's call
# ran out of time before reaching all of them).
RUN=${RUN:-run24}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "real_sizes and not atomic" 2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' \
  | tee "$RES/pytest_gpu_triton_fa2_real_sizes.txt"
