#!/usr/bin/env bash
# Wheels of trainperf's optional GPU extras, and of everything they need beyond torch, for a GPU
# machine without network access: FlashAttention 4 with quack-kernels and the CUTLASS CuTe DSL,
# Liger Kernel, torchao and the cuDNN frontend, at the versions the committed results were measured
# with. Where that machine takes copies of limited size, tools/wheel_parts.py carries them in parts.
#   tools/offline-wheels.sh DIR [PYTHON_VERSION (3.12)] [CUDA_MAJOR (13)] [PLATFORM (manylinux_2_28_x86_64)]
# On the GPU machine: python -m pip install --no-deps DIR/*.whl
# (or --target a folder, with that folder and FOLDER/nvidia_cutlass_dsl/dsl_packages on PYTHONPATH).
set -euo pipefail
dir=${1:?usage: tools/offline-wheels.sh DIR [PYTHON_VERSION] [CUDA_MAJOR] [PLATFORM]}
python=${2:-3.12}
cuda=${3:-13}
platform=${4:-manylinux_2_28_x86_64}
dsl=4.8.1
pip download --no-deps --dest "$dir" --python-version "$python" --platform "$platform" --only-binary=:all: \
  flash-attn-4==4.0.0b36 quack-kernels==0.6.5 \
  nvidia-cutlass-dsl==$dsl nvidia-cutlass-dsl-libs-base==$dsl nvidia-cutlass-dsl-libs-core==$dsl \
  nvidia-cutlass-dsl-libs-cu$cuda==$dsl "cuda-bindings>=$cuda,<$((cuda + 1))" cuda-pathfinder \
  "apache-tvm-ffi>=0.1.11,<0.2" torch-c-dlpack-ext einops protobuf \
  liger-kernel==0.8.5 torchao==0.18.0 nvidia-cudnn-frontend==1.32.0
ls -l "$dir"
