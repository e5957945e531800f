#!/usr/bin/env bash
# GPU run 47 (session 7): issue 3's benchmark as the issue states it, with triton-fa2 v5.2:
#   trainperf attention --impl all --head-dim 16,32,64,128 --seq 256,1024,4096,8192,16384 --batch 8
#     --dtype bf16 --mode fwd,bwd,fwd+bwd
# in stages (fused backends; our Triton kernels; the N²-memory implementations; torch-fa2), each
# resuming from the store, so the script is simply run again until every stage is done (one call
# of the device tool may last 10 minutes). torch-fa2 (plain PyTorch tiles, seconds per call at
# 8192 and 16384 tokens) takes 1 warm-up and 3 timed calls at those two lengths.
RUN=${RUN:-run47}
source benchmarks/scripts/common.sh
BUDGET=${BUDGET:-540}
START=$SECONDS
A="python3 -m trainperf attention --db $RES/attention.db --out $RES/plots --batch 8 --heads 16 --dtype bf16
   --causal on --mode fwd,bwd,fwd+bwd --head-dim 16,32,64,128 --quiet"
SEQ=256,1024,4096,8192,16384
stage() {  # name, then the arguments of this stage's trainperf call
  local name=$1 left=$((BUDGET - (SECONDS - START)))
  shift
  if [ $left -lt 30 ]; then echo "stage $name: no time left in this call"; return; fi
  timeout $left $A "$@" > "$RES/attention_$name.txt" 2>&1
  echo "stage $name: exit $? after $((SECONDS - START)) s"
}
stage fused --impl sdpa-cudnn,sdpa-flash,sdpa-efficient,sdpa --seq $SEQ
stage triton --impl triton-fa2,triton-fa2-atomic --seq $SEQ
stage quadratic --impl naive,naive-compiled,sdpa-math --seq $SEQ
stage torch_fa2 --impl torch-fa2 --seq 256,1024,4096
stage torch_fa2_long --impl torch-fa2 --seq 8192,16384 --warmup 1 --reps 3
python3 -m trainperf results --db "$RES/attention.db" 2>&1 | tail -3
