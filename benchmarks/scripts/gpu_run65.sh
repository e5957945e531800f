#!/usr/bin/env bash
# GPU run 65 (session 9): the attention benchmark at issue 3's three target shapes with every
# fused SDPA backend and triton-fa2 v5.6, now with each case's clock and power (GpuMonitor);
# a short step sweep to see the monitor there; the monitor's GPU test.
RUN=${RUN:-run65}
source benchmarks/scripts/common.sh
DB="$RES/attention.db"
IMPLS=sdpa-cudnn,sdpa-flash,sdpa-efficient,triton-fa2
common=(--dtype bf16 --mode fwd+bwd --causal on --warmup 10 --reps 100 --db "$DB")
timeout 200 python3 -m trainperf attention --impl $IMPLS --batch 1 --heads 16 --seq 16384 --head-dim 64 "${common[@]}" --out "$RES/plots" 2>&1 | tee "$RES/attention_reference.txt"
timeout 120 python3 -m trainperf attention --impl $IMPLS --batch 1 --heads 8 --seq 16384 --head-dim 128 "${common[@]}" 2>&1 | tee "$RES/attention_d128.txt"
timeout 120 python3 -m trainperf attention --impl $IMPLS --batch 8 --heads 16 --seq 2048 --head-dim 64 "${common[@]}" 2>&1 | tee "$RES/attention_b8_s2048.txt"
python3 -m trainperf export --db "$DB" -o "$RES/attention.csv"
timeout 90 python3 -m trainperf step --size small --context 1024 --batch 8 --precision bf16 --db "$RES/step.db" 2>&1 | tee "$RES/step.txt"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_monitor.py 2>&1 | tail -2 | tee "$RES/pytest_gpu_monitor.txt"
