#!/usr/bin/env bash
# GPU run 28 (session 5): the dK/dV kernel with dP's product before the exponentials (v4) or
# after dV's product (v3), every tile shape, at the reference shape and head dim 128: v4 keeps
# two float32 tiles alive at once, and at head dim 128 the kernel spills.
RUN=${RUN:-run28}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_kernel_configs.py
timeout 200 python3 $P 1 8 16384 128 "$RES/configs_d128.csv" > "$RES/configs_d128.txt" 2>&1
timeout 200 python3 $P 1 16 16384 64 "$RES/configs_reference.csv" > "$RES/configs_reference.txt" 2>&1
grep -h fastest "$RES"/configs_*.txt
