#!/usr/bin/env bash
# GPU run 62 (session 9): kernel profiles of triton-fa2 v5.6 at the reference shape and at
# B8 × 2048 (GPU time per kernel: the dQ kernel now computes D), then v5.6 against v5.5
# (BASELINE, commit 91fe3ae) and cuDNN again at the reference, in 20 alternating rounds.
RUN=${RUN:-run62}
source benchmarks/scripts/common.sh
for shape in "1 16384" "8 2048"; do
  set -- $shape
  timeout 90 python3 -m trainperf profile attention --impl triton-fa2 --batch $1 --heads 16 --seq $2 --head-dim 64 \
    --steps 5 --out "$RES/profiles_b$1_s$2" > "$RES/profile_triton-fa2_b$1_s$2.txt" 2>&1
  grep -a -A12 "top kernels" "$RES/profile_triton-fa2_b$1_s$2.txt" | cut -c1-150
done
rounds rounds_v56.txt 150 20 direct,baseline "1 16 16384 64"
