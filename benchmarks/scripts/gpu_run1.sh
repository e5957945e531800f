#!/usr/bin/env bash
# GPU run 1: test suite on the GPU, the attention benchmark, per-module profiles and a memory profile.
RUN=run1
source benchmarks/scripts/common.sh
DB=$RES/attention.db
TRAINPERF_TRITON_TUNE=0 timeout 300 python3 -m pytest -q -p no:warnings tests/ 2>&1 | grep -v USDT | tail -25 > "$RES/pytest_gpu.txt"
tail -3 "$RES/pytest_gpu.txt"
A="tp attention --db $DB --out $RES/plots --dtype bf16 --mode fwd+bwd --causal on --quiet"
FAST=sdpa-flash,sdpa-efficient,sdpa-cudnn,triton-fa2
# the reference configuration (B=1, H=16, N=16384, d=64), then the same fast ones again
$A --impl naive,naive-compiled,sdpa-math,$FAST --batch 1 --heads 16 --seq 16384 --head-dim 64 | tee "$RES/attention_reference.txt"
$A --impl $FAST --batch 1 --heads 16 --seq 16384 --head-dim 64 --rerun | tee "$RES/attention_reference_repeat.txt"
$A --impl $FAST --batch 1 --heads 8 --seq 16384 --head-dim 128 | tee "$RES/attention_d128.txt"
$A --impl $FAST --batch 8 --heads 16 --seq 2048 --head-dim 64 | tee "$RES/attention_b8_s2048.txt"
$A --impl naive,naive-compiled,sdpa-math,$FAST --batch 8 --heads 16 --seq 256,1024,4096,16384 --head-dim 64,128 | tee "$RES/attention_sweep.txt"
$A --impl torch-fa2 --batch 8 --heads 16 --seq 256,1024,4096 --head-dim 64 --reps 5 --warmup 1 | tee "$RES/attention_torch_fa2.txt"
tp export --db $DB --workload attention --format csv -o "$RES/attention.csv"
for norm in torch fused; do
  timeout 120 python3 -m trainperf profile step --size medium --context 512 --precision bf16 --norm $norm --out "$RES/profiles" 2>&1 | grep -v USDT > "$RES/profile_medium_$norm.txt"
done
tp profile-compare "$RES"/profiles/profile_step_medium_ctx512_bf16_sdpa_torch.json "$RES"/profiles/profile_step_medium_ctx512_bf16_sdpa_fused.json --csv "$RES/profile_compare_norm.csv" > "$RES/profile_compare_norm.txt" 2>&1
timeout 120 python3 -m trainperf memory step --size medium --context 512 --precision bf16 --out "$RES/memory" 2>&1 | grep -v USDT > "$RES/memory_medium.txt"
ls -la "$RES"/memory
