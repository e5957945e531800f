#!/usr/bin/env bash
# GPU run 51 (session 7): the whole test suite on the GPU with the session's final code (v5.4, the
# recompile-limit helper), Triton autotuning limited to each list's first shape.
RUN=${RUN:-run51}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 480 python3 -m pytest -q -p no:cacheprovider -x tests 2>&1 | tail -8 \
  | sed "s|/opt/[^ ]*site-packages/|<site-packages>/|g; s|$PWD/||g" | tee "$RES/pytest_gpu_all.txt"
