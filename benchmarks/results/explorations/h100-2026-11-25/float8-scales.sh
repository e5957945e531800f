# . benchmarks/probes/float8-scales.sh HISTORY:MARGIN... : `trainperf parity --recipe stock,fp8`
# (2 layers, 100 AdamW steps, one run) with the float8 MLP's amax history length and scale margin
# set to each pair in turn.
for hm in "$@"; do
  python3 -c "import sys, trainperf.kernels.float8_mlp as f; h, m = sys.argv[1].split(':'); \
f.HISTORY, f.MARGIN = int(h), int(m); sys.argv[1:2] = []; from trainperf.cli import app; app()" "$hm" \
    parity --recipe stock,fp8 --layers 2 --train-steps 100 --repeats 1 \
    --db /tmp/margin-$hm.db --out $OUT/scales-${hm/:/-} --quiet 2>&1 | grep -E "FLAG|ok  " | head -4
  echo "history:margin $hm done"
done
