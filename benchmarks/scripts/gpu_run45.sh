#!/usr/bin/env bash
# GPU run 45 (session 6): the attention GPU tests after the review fold of the descriptor helpers
# (same instructions for sm_90, loop bodies identical; checked on the GPU all the same).
RUN=${RUN:-run45}
source benchmarks/scripts/common.sh
gpu_attention_tests 300 "real_sizes or ragged"
