#!/usr/bin/env bash
# GPU run 53 (session 8): the library's head-group order against cuDNN in alternating rounds at
# the three target shapes, then the GPU tests of triton-fa2 and of its launch order.
RUN=${RUN:-run53}
source benchmarks/scripts/common.sh
rounds_vs_cudnn 150
gpu_attention_tests 200 "head_groups or (real_sizes and not atomic) or ragged or growing or wider"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_fa2_schedule.py 2>&1 | tail -2 | tee "$RES/pytest_gpu_schedule.txt"
