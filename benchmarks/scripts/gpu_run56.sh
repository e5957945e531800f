#!/usr/bin/env bash
# GPU run 56 (session 8): v5.5's launch order against the one before, end to end: cuDNN and
# triton-fa2 with head groups of 1 (v5.4's order) and 4 (v5.5) in the same alternating rounds
# (16 rounds of 40 calls) at the three target shapes.
RUN=${RUN:-run56}
source benchmarks/scripts/common.sh
rounds rounds_groups.txt 180 16 g1,g4 "${TARGETS[@]}"
