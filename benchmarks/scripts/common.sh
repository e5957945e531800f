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
TARGETS=("1 16 16384 64" "1 8 16384 128" "8 16 2048 64")  # issue 3's three target shapes, B H N D
rounds() {  # triton-fa2 (and its variants) against cuDNN in alternating rounds of 40 calls, per shape;
  # $1: output file in $RES, $2: timeout (s) per shape, $3: rounds, $4: variants ("" for none), then shapes "B H N D"
  local file=$1 limit=$2 count=$3 variants=$4 shape
  shift 4
  for shape in "$@"; do
    timeout "$limit" python3 benchmarks/scripts/fa2_vs_cudnn_rounds.py $shape $count 40 $variants 2>&1 | tee -a "$RES/$file"
  done
}
rounds_vs_cudnn() { rounds rounds.txt "$1" 12 "" "${TARGETS[@]}"; }  # $1: timeout (s) per target
baseline_src() {  # a copy of src/ in /tmp/base_src with BASELINE's flash_triton.py, for PYTHONPATH
  rm -rf /tmp/base_src && cp -r src /tmp/base_src
  cp "${BASELINE:?path of the baseline flash_triton.py}" /tmp/base_src/trainperf/attention/flash_triton.py
}
fwd_against_baseline() {  # $1: this tree's version tag, then shapes "B H N D": every forward tile shape,
  # this tree's kernel and BASELINE's (v5.2's flash_triton.py, baseline_src), same run
  local tag=$1 shape name
  shift
  baseline_src
  for shape in "$@"; do
    name=$(echo $shape | tr ' ' _)
    python3 benchmarks/scripts/fa2_kernel_configs.py $shape "$RES/fwd_${tag}_$name.csv" fwd \
      > "$RES/fwd_${tag}_$name.txt" 2>&1
    PYTHONPATH=/tmp/base_src python3 benchmarks/scripts/fa2_kernel_configs.py $shape "$RES/fwd_v52_$name.csv" fwd \
      > "$RES/fwd_v52_$name.txt" 2>&1
    grep fastest "$RES/fwd_${tag}_$name.txt" "$RES/fwd_v52_$name.txt"
  done
}
gpu_attention_tests() {  # $1: timeout (s), $2: pytest -k expression; the attention tests, each Triton list's first shape
  TRAINPERF_TRITON_TUNE=0 timeout "$1" python3 -m pytest -q -p no:cacheprovider tests/test_attention_impls.py \
    -k "$2" 2>&1 | tail -4 | sed 's|/opt/[^ ]*site-packages/|<site-packages>/|g' | tee "$RES/pytest_gpu_attention.txt"
}
suite() {  # $1: name, then test files; the GPU test suite in one process of several (run 54 on)
  local name=$1
  shift
  TRAINPERF_TRITON_TUNE=0 timeout 560 python3 -m pytest -q -p no:cacheprovider -rfEs --durations=8 "$@" 2>&1 \
    | sed "s|/opt/[^ ]*site-packages/|<site-packages>/|g; s|$PWD/||g" > "$RES/pytest_gpu_$name.txt"
  echo "exit ${PIPESTATUS[0]}" >> "$RES/pytest_gpu_$name.txt"
}
MODEL_TESTS="tests/test_llama.py tests/test_step.py tests/test_lm.py tests/test_memory_precision.py"
other_tests() {  # the test files neither in MODEL_TESTS nor attention / kernel tests
  ls tests/test_*.py | grep -v -e attention_impls -e fa2_schedule -e kernels -e llama -e test_step -e test_lm \
    -e memory_precision
}
