#!/usr/bin/env bash
# GPU run 60 (session 9): v5.6 (D computed in the dQ kernel, which runs before the dK/dV kernel;
# one launch fewer) against v5.5 (BASELINE: its flash_triton.py, commit 91fe3ae) and cuDNN in the
# same alternating rounds (12 × 40 calls) at the three target shapes and at B1 H16 N1024 d64
# (host-bound).
RUN=${RUN:-run60}
source benchmarks/scripts/common.sh
rounds rounds_v56.txt 140 12 direct,baseline "${TARGETS[@]}" "1 16 1024 64"
