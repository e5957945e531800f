#!/usr/bin/env bash
# GPU run 48 (session 7): the forward with lazy rescaling (v5.3: the running row maxima move, and
# O and l are rescaled, only when some row's maximum grew by more than 2^8), every tile shape at
# the three target shapes and at B8 H16 N4096 d128 (the sweep's weakest forward, run 47), against
# v5.2's forward in the same run (BASELINE: a copy of v5.2's flash_triton.py, used from a copy of
# src/), then the GPU tests of triton-fa2 (real sizes, ragged lengths, scores growing along keys).
# v5.3 is commit fcceffb (reverted after this run): check it out, keep v5.2's flash_triton.py as
# BASELINE, and run this script.
RUN=${RUN:-run48}
source benchmarks/scripts/common.sh
fwd_against_baseline v53 "${TARGETS[@]}" "8 16 4096 128"
gpu_attention_tests 200 "(real_sizes and not atomic) or ragged or growing"
