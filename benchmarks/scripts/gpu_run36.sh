#!/usr/bin/env bash
# GPU run 36 (session 6): the attention sweep again with triton-fa2 v5 (batch 1, 16 heads, causal,
# bf16, forward + backward, head dims 64 and 128, sequences 1k-16k) against the fused SDPA
# backends, with the CSV and the time/memory plots; the reference configuration first and last
# in the same run, to see the drift.
RUN=${RUN:-run36}
source benchmarks/scripts/common.sh
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet --warmup 10 --reps 50"
I=sdpa-cudnn,sdpa-flash,sdpa-efficient,triton-fa2
timeout 120 $A --impl $I --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode fwd+bwd | tee "$RES/attention_reference.txt"
timeout 300 $A --impl $I --batch 1 --heads 16 --seq 1024,4096,16384 --head-dim 64,128 --mode fwd+bwd \
  | tee "$RES/attention_sweep.txt"
# (its own plot folder: as first run, it wrote its two-point plots over the sweep's, which were
# then drawn again from the store, each case's first record)
timeout 100 $A --rerun --out $RES/plots_repeat --impl sdpa-cudnn,triton-fa2 --batch 1 --heads 16 --seq 16384 \
  --head-dim 64 --mode fwd+bwd | tee "$RES/attention_reference_repeat.txt"
