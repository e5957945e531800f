# Sourced by the GPU run scripts: where results go, how to call trainperf, how to pack results.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
RUN=${RUN:?name of this run}
OUT=${OUT:-out}
RES=results/$RUN
mkdir -p "$RES" "$OUT"
tp() { python3 -m trainperf "$@"; }
pack() {  # few tarballs (the device tool returns at most 8 files of 16 MB); snapshots apart
  tar czf "$OUT/$RUN.tgz" --exclude='*.pickle' results
  find results -name '*.pickle' | tar czf "$OUT/${RUN}_snapshots.tgz" -T - 2>/dev/null
  ls -la "$OUT"
}
trap pack EXIT
{
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "triton", triton.__version__, "transformers", transformers.__version__)'
} > "$RES/environment.txt" 2>&1
tp env > "$RES/env.json"
