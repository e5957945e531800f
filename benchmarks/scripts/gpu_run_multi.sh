#!/usr/bin/env bash
# Multi-GPU run (issues 5 and 7): collectives and DDP variants on every GPU of the machine.
# NVLink multicast stays off (the device tool's KINDS.md): NCCL_NVLS_ENABLE=0 etc. are kept.
# Usage: RUN=multi-h200x2 bash benchmarks/scripts/gpu_run_multi.sh   (world sizes up to nvidia-smi -L)
RUN=${RUN:-multi}
source benchmarks/scripts/common.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$(nvidia-smi -L | wc -l)
WORLDS=$(python3 -c "print(','.join(str(w) for w in (2, 4, 8) if w <= $N))")
T="python3 -m trainperf"
# bare loop first (the baseline the issue compares with), then every op; sizes up to 8 GB on 8 GPUs
SIZES=1MB,10MB,100MB,1GB,4GiB; [ "$N" -ge 8 ] && SIZES=1MB,10MB,100MB,1GB,4GiB,8GB
timeout 280 $T comm --backend nccl --world-size "$WORLDS" --op all_reduce_loop,all_reduce,all_gather,reduce_scatter,broadcast \
  --size "$SIZES" --iters 20 --db "$RES/comm.db" --out "$RES" --quiet | tee "$RES/comm.txt"
SIZE=small; [ "$N" -ge 8 ] && SIZE=xl
timeout 280 $T ddp --backend nccl --size $SIZE --world-size "$WORLDS" --variant naive,flat,overlap,bucketed,ddp,fsdp2 \
  --bucket-mb 1,25,100 --shard-optimizer off,on --db "$RES/ddp.db" --quiet | tee "$RES/ddp.txt"
$T export --db "$RES/comm.db" --format csv -o "$RES/comm.csv"
$T export --db "$RES/ddp.db" --format csv -o "$RES/ddp.csv"
