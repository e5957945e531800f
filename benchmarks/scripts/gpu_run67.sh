#!/usr/bin/env bash
# GPU run 67 (session 9): the test suite on the GPU except the attention and kernel tests (run 61
# ran those for v5.6): models, step, Llama, distributed, CLI and the rest, with GpuMonitor in
# every workload; two processes at once (see run 54).
RUN=${RUN:-run67}
source benchmarks/scripts/common.sh
suite models $MODEL_TESTS &
suite rest $(other_tests) &
wait
tail -n 3 "$RES"/pytest_gpu_*.txt
