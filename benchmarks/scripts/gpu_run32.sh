#!/usr/bin/env bash
# GPU run 32 (session 6): do TMA loads (tensor descriptors, mbarriers) beat cp.async loads in the
# three triton-fa2 kernels? Every listed tile shape with both, at the three issue-3 shapes
# (d128 and B8 x 2048: the TMA versions only, against run 26's pointer versions).
# Ran at commit cdcbdb1; the forward and dQ switch it measured was taken out again after it.
RUN=${RUN:-run32}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_kernel_configs.py
timeout 330 python3 $P 1 16 16384 64 "$RES/configs_reference.csv" fwd,fwd-tma,dkdv,dkdv-tma,dq,dq-tma \
  > "$RES/configs_reference.txt" 2>&1
timeout 150 python3 $P 1 8 16384 128 "$RES/configs_d128.csv" fwd-tma,dkdv-tma,dq-tma > "$RES/configs_d128.txt" 2>&1
timeout 80 python3 $P 8 16 2048 64 "$RES/configs_b8_s2048.csv" fwd-tma,dkdv-tma,dq-tma > "$RES/configs_b8_s2048.txt" 2>&1
grep -h fastest "$RES"/configs_*.txt
