#!/usr/bin/env bash
# GPU run 4 (session 2): GPU tests of the kernels, triton-fa2 v2 against SDPA, Llama stock vs --fast.
RUN=${RUN:-run4}
source benchmarks/scripts/common.sh
TRAINPERF_TRITON_TUNE=0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
  tests/test_kernels.py > "$RES/pytest_gpu.txt" 2>&1; tail -3 "$RES/pytest_gpu.txt"
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --dtype bf16 --causal on --quiet"
IMPLS=sdpa-cudnn,sdpa-flash,triton-fa2
timeout 150 $A --impl $IMPLS,sdpa-efficient --batch 1 --heads 16 --seq 16384 --head-dim 64 --mode fwd+bwd,fwd,bwd \
  | tee "$RES/attention_reference.txt"
timeout 60 $A --impl $IMPLS --batch 1 --heads 8 --seq 16384 --head-dim 128 --mode fwd+bwd | tee "$RES/attention_d128.txt"
timeout 60 $A --impl $IMPLS --batch 8 --heads 16 --seq 2048 --head-dim 64 --mode fwd+bwd | tee "$RES/attention_b8_s2048.txt"
timeout 260 python3 -m trainperf llama --backend CUDNN_ATTENTION --fast --iters 20 --warmup 5 --db "$RES/llama.db" \
  --out "$RES/llama" --quiet | tee "$RES/llama_eager.txt"
