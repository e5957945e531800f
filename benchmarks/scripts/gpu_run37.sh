#!/usr/bin/env bash
# GPU run 37 (session 6): host time against stream time of one triton-fa2 forward + backward at
# small and large shapes (run 36: 0.89 ms at B1 x 1024, where cuDNN takes 0.31 ms).
RUN=${RUN:-run37}
source benchmarks/scripts/common.sh
timeout 200 python3 benchmarks/scripts/fa2_host_overhead.py 2>&1 | tee "$RES/host_overhead.txt"
