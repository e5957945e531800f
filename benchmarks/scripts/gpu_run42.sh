#!/usr/bin/env bash
# GPU run 42 (session 6): the attention GPU tests, with the new head dim 40 shape (a descriptor box
# wider than the head: 64 columns over 40).
RUN=${RUN:-run42}
source benchmarks/scripts/common.sh
gpu_attention_tests 300 "real_sizes or ragged"
