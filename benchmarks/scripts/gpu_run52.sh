#!/usr/bin/env bash
# GPU run 52 (session 8): the causal launch order by head groups (v5.5 candidate, `_schedule`):
# each kernel's autotuned tile with head groups of 1 (the order before), 2, 4, 8 and 16 heads, in
# alternating rounds, at the three target shapes and B8 H16 N4096 d128.
RUN=${RUN:-run52}
source benchmarks/scripts/common.sh
for shape in "${TARGETS[@]}" "8 16 4096 128"; do
  tag=$(echo $shape | tr ' ' _)
  timeout 200 python3 benchmarks/scripts/fa2_head_groups.py $shape 1,2,4,8,16 5 "$RES/head_groups_$tag.csv" \
    > "$RES/head_groups_$tag.txt" 2>&1
  cut -c1-160 "$RES/head_groups_$tag.txt"
done
