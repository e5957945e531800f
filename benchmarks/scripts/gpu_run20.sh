#!/usr/bin/env bash
# GPU run 20 (session 4): the test files this session touched, on the GPU (bf16 kernels, the
# Llama workload with --kv-heads, profiles that keep every kernel).
RUN=${RUN:-run20}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 540 python3 -m pytest -q -p no:cacheprovider tests/test_llama.py \
  tests/test_profiling.py tests/test_kernels.py 2>&1 | tail -15 | tee "$RES/pytest_gpu.txt"
