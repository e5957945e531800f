#!/usr/bin/env bash
# GPU run 54 (session 8): the whole test suite on the GPU (run 51 ran out of time in one process):
# three processes over disjoint test files at once, each with its own time limit and its whole
# summary kept; Triton autotuning limited to each list's first shape.
RUN=${RUN:-run54}
source benchmarks/scripts/common.sh
suite() {  # $1: name, then test files
  local name=$1
  shift
  TRAINPERF_TRITON_TUNE=0 timeout 560 python3 -m pytest -q -p no:cacheprovider -rfEs --durations=8 "$@" 2>&1 \
    | sed "s|/opt/[^ ]*site-packages/|<site-packages>/|g; s|$PWD/||g" > "$RES/pytest_gpu_$name.txt"
  echo "exit ${PIPESTATUS[0]}" >> "$RES/pytest_gpu_$name.txt"
}
if [ -n "${RERUN:-}" ]; then  # second call: the parts the first did not finish or failed (FSDP2 fix)
  suite fa2_real tests/test_attention_impls.py -k "real_sizes and not atomic" &
  suite fa2_atomic_real tests/test_attention_impls.py -k "real_sizes and atomic" &
  suite attention tests/test_attention_impls.py tests/test_fa2_schedule.py tests/test_kernels.py -k "not real_sizes" &
  suite distributed tests/test_distributed.py &
else
  suite attention tests/test_attention_impls.py tests/test_fa2_schedule.py tests/test_kernels.py &
  suite models tests/test_llama.py tests/test_step.py tests/test_lm.py tests/test_memory_precision.py &
  suite rest $(ls tests/test_*.py | grep -v -e attention_impls -e fa2_schedule -e kernels -e llama -e test_step \
    -e test_lm -e memory_precision) &
fi
wait
tail -n 3 "$RES"/pytest_gpu_*.txt
