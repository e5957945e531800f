#!/usr/bin/env bash
# GPU run 61 (session 9): the GPU tests of triton-fa2 v5.6 (bf16 and fp16 at real sizes, both
# backward variants, ragged lengths, wide key blocks, head groups) and of its launch order.
RUN=${RUN:-run61}
source benchmarks/scripts/common.sh
gpu_attention_tests 420 "real_sizes or head_groups or ragged or growing or wider or later_calls"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_fa2_schedule.py 2>&1 | tail -2 | tee "$RES/pytest_gpu_schedule.txt"
