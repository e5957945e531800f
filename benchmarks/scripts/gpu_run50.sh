#!/usr/bin/env bash
# GPU run 50 (session 7): v5.4 (the 64×128 dQ shape in the autotuning list) against cuDNN in
# alternating rounds at the three target shapes (12 rounds of 40 calls; first a check of the
# autotuned kernels' gradients against cuDNN's), as run 44 did for v5.2.
RUN=${RUN:-run50}
source benchmarks/scripts/common.sh
rounds_vs_cudnn 150
