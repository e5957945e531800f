#!/usr/bin/env bash
# GPU run 54 (session 8): the whole test suite on the GPU (run 51 ran out of time in one process):
# three processes over disjoint test files at once, each with its own time limit and its whole
# summary kept; Triton autotuning limited to each list's first shape.
RUN=${RUN:-run54}
source benchmarks/scripts/common.sh
if [ -n "${RERUN:-}" ]; then  # second call: the parts the first did not finish or failed (FSDP2 fix)
  suite fa2_real tests/test_attention_impls.py -k "real_sizes and not atomic" &
  suite fa2_atomic_real tests/test_attention_impls.py -k "real_sizes and atomic" &
  suite attention tests/test_attention_impls.py tests/test_fa2_schedule.py tests/test_kernels.py -k "not real_sizes" &
  suite distributed tests/test_distributed.py &
else
  suite attention tests/test_attention_impls.py tests/test_fa2_schedule.py tests/test_kernels.py &
  suite models $MODEL_TESTS &
  suite rest $(other_tests) &
fi
wait
tail -n 3 "$RES"/pytest_gpu_*.txt
