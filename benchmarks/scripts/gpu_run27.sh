#!/usr/bin/env bash
# GPU run 27 (session 5): does Triton's warp specialisation (a TMA producer warp, consumer warp
# groups) speed up the causal forward on Hopper? Probe kernel against triton-fa2 and cuDNN at the
# reference shape and at head dim 128.
RUN=${RUN:-run27}
source benchmarks/scripts/common.sh
P=benchmarks/scripts/fa2_warp_specialized.py
timeout 200 python3 $P 1 16 16384 64 fwd 2>&1 | grep -v Warning | tee "$RES/ws_forward_reference.txt"
timeout 200 python3 $P 1 8 16384 128 fwd 2>&1 | grep -v Warning | tee "$RES/ws_forward_d128.txt"
