#!/usr/bin/env bash
# GPU run 38 (session 6): v5's dK/dV kernel with deeper load pipelines (4 and 5 stages), at the
# reference and at head dim 128.
RUN=${RUN:-run38}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_kernel_configs.py
timeout 150 python3 $P 1 16 16384 64 "$RES/configs_reference.csv" dkdv > "$RES/configs_reference.txt" 2>&1
timeout 150 python3 $P 1 8 16384 128 "$RES/configs_d128.csv" dkdv > "$RES/configs_d128.txt" 2>&1
grep -h "fastest\|'stages': [45]" "$RES"/configs_*.txt
