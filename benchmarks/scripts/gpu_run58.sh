#!/usr/bin/env bash
# GPU run 58 (session 8): the direct launch against the autotuner's dispatch on every call, end to
# end: cuDNN and both triton-fa2 variants in the same alternating rounds (16 × 40 calls) at the
# three target shapes and at B1 H16 N1024 d64 (host-bound).
RUN=${RUN:-run58}
source benchmarks/scripts/common.sh
rounds rounds_launch.txt 150 16 dispatch,direct "${TARGETS[@]}" "1 16 1024 64"
