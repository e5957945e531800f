#!/usr/bin/env bash
# GPU run 43 (session 6): the dQ kernel with K and V through the TMA unit, every listed and extra
# tile shape with both load paths, at head dim 128 and at the reference. (Run 32 had the 64x64
# dQ shapes 12% faster with descriptors at head dim 128; a 2-stage one may keep two programs per
# SM, as it did for the dK/dV kernel in run 38.) Ran at commit adfa29e, where "dq-tma" was the
# descriptor version and "dq" the cp.async one; after it the probe calls them "dq" and "dq-cp.async".
RUN=${RUN:-run43}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_kernel_configs.py
timeout 170 python3 $P 1 8 16384 128 "$RES/configs_d128.csv" dq,dq-tma > "$RES/configs_d128.txt" 2>&1
timeout 170 python3 $P 1 16 16384 64 "$RES/configs_reference.csv" dq,dq-tma > "$RES/configs_reference.txt" 2>&1
grep -h "fastest" "$RES"/configs_*.txt
