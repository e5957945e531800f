#!/usr/bin/env bash
# GPU run 44 (session 6): triton-fa2 v5.2 (the dQ kernel also reads K and V through the TMA unit):
# the attention GPU tests, then alternating rounds against cuDNN at the three issue-3 targets.
RUN=${RUN:-run44}
source benchmarks/scripts/common.sh
gpu_attention_tests 200 "real_sizes or ragged"
rounds_vs_cudnn 120
