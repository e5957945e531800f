#!/usr/bin/env bash
# GPU run 46 (session 7): the forward software-pipelined by one key block (v6: block j's softmax
# runs while block j-1's P·V product is in flight), every tile shape at the three target shapes,
# against v5.2's forward in the same run (BASELINE: a copy of v5.2's flash_triton.py, used from a
# copy of src/), then the bf16/fp16 GPU tests of triton-fa2. v6 is commit 564268e (reverted after
# this run): check it out, keep v5.2's flash_triton.py as BASELINE, and run this script.
RUN=${RUN:-run46}
source benchmarks/scripts/common.sh
fwd_against_baseline v6 "${TARGETS[@]}"
gpu_attention_tests 240 "(real_sizes and not atomic) or ragged"
