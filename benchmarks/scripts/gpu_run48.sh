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
BASE=${BASELINE:?path of the baseline flash_triton.py}
rm -rf /tmp/base_src && cp -r src /tmp/base_src && cp "$BASE" /tmp/base_src/trainperf/attention/flash_triton.py
for shape in "1 16 16384 64" "1 8 16384 128" "8 16 2048 64" "8 16 4096 128"; do
  tag=$(echo $shape | tr ' ' _)
  python3 benchmarks/scripts/fa2_kernel_configs.py $shape "$RES/fwd_v53_$tag.csv" fwd > "$RES/fwd_v53_$tag.txt" 2>&1
  PYTHONPATH=/tmp/base_src python3 benchmarks/scripts/fa2_kernel_configs.py $shape "$RES/fwd_v52_$tag.csv" fwd \
    > "$RES/fwd_v52_$tag.txt" 2>&1
  grep fastest "$RES/fwd_v53_$tag.txt" "$RES/fwd_v52_$tag.txt"
done
TRAINPERF_TRITON_TUNE=0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  -k "(real_sizes and not atomic) or ragged or growing" 2>&1 | tail -4 \
  | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' | tee "$RES/pytest_gpu_attention.txt"
