#!/usr/bin/env bash
# GPU run 49 (session 7): forward and dQ tiles with key blocks wider than query blocks (64×128;
# the causal diagonal then lies inside a masked key block, commit below), next to every listed
# tile shape, at the three target shapes and B8 H16 N4096 d128; then the GPU tests of triton-fa2.
RUN=${RUN:-run49}
source benchmarks/scripts/common.sh
for shape in "1 16 16384 64" "1 8 16384 128" "8 16 2048 64" "8 16 4096 128"; do
  tag=$(echo $shape | tr ' ' _)
  python3 benchmarks/scripts/fa2_kernel_configs.py $shape "$RES/fwd_dq_$tag.csv" fwd,dq > "$RES/fwd_dq_$tag.txt" 2>&1
  grep fastest "$RES/fwd_dq_$tag.txt"
done
gpu_attention_tests 200 "(real_sizes and not atomic) or ragged or growing or wider"
