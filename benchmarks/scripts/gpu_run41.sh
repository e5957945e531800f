#!/usr/bin/env bash
# GPU run 41 (session 6): triton-fa2 v5.1 against cuDNN in alternating rounds at the three issue-3
# targets (a ratio that clock drift cannot tilt), with a gradient check of the autotuned kernels.
RUN=${RUN:-run41}
source benchmarks/scripts/common.sh
rounds_vs_cudnn 150
