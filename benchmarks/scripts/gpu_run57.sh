#!/usr/bin/env bash
# GPU run 57 (session 8): host time of a triton-fa2 call before and after the direct launch with
# the autotuner's choice (BASELINE: v5.5's flash_triton.py, used from a copy of src/), then this
# tree against cuDNN in alternating rounds at the three target shapes.
RUN=${RUN:-run57}
source benchmarks/scripts/common.sh
baseline_src
for round in 1 2; do
  echo "round $round, v5.5 (autotuner dispatch on every call)" | tee -a "$RES/host_overhead.txt"
  PYTHONPATH=/tmp/base_src python3 benchmarks/scripts/fa2_host_overhead.py 2>&1 | tee -a "$RES/host_overhead.txt"
  echo "round $round, direct launch" | tee -a "$RES/host_overhead.txt"
  python3 benchmarks/scripts/fa2_host_overhead.py 2>&1 | tee -a "$RES/host_overhead.txt"
done
rounds_vs_cudnn 150
