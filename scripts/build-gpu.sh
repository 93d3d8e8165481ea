#!/usr/bin/env bash
# Builds ddpbench and its tests against the LibTorch inside this machine's PyTorch wheel, with CUDA
# and NCCL, into build-gpu/. For a machine without a package registry: CLI11, nlohmann/json, NVTX,
# GoogleTest and Gloo's headers come from DEPS (default .deps/), which scripts/gather-deps.sh fills
# on a Debian machine. Extra arguments go to CMake's configure step.
# Usage: [PYTHON=python3] [DDPBENCH_DEPS_DIR=.deps] [DDPBENCH_BUILD_DIR=build-gpu]
#        [DDPBENCH_CONFIGURE_ONLY=1] [DDPBENCH_BUILD_TARGETS="ddpbench ..."] scripts/build-gpu.sh [-DVAR=VALUE ...]
# (DDPBENCH_BUILD_TARGETS: build only these, default all; scripts/gpu-visit.sh builds ddpbench first.)
# (tests/gpu_build_path.sh runs it on CPU builds too, configure-only, so its steps do not rot.)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
deps="$(realpath "${DDPBENCH_DEPS_DIR:-.deps}")"
if [ ! -d "$deps" ]; then
  echo "build-gpu: $deps does not exist: fill it with scripts/gather-deps.sh on a machine that has the packages" >&2
  exit 2
fi
build_dir="${DDPBENCH_BUILD_DIR:-build-gpu}"
torch_prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
site="$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
mkdir -p "$build_dir"

# LibTorch's CMake package insists on finding cuDNN, which the wheel keeps in the nvidia-cudnn
# wheel under a versioned name only (libcudnn.so.9): give it an unversioned link.
cudnn_args=()
cudnn_lib="$(find "$site/nvidia" -name 'libcudnn.so*' 2>/dev/null | sort | head -1 || true)"
if [ -n "$cudnn_lib" ]; then
  cudnn_root="$(dirname "$(dirname "$cudnn_lib")")"
  ln -sf "$cudnn_lib" "$build_dir/libcudnn.so"
  cudnn_args=(-DCUDNN_ROOT="$cudnn_root" -DCUDNN_INCLUDE_PATH="$cudnn_root/include"
              -DCUDNN_LIBRARY_PATH="$(realpath "$build_dir")/libcudnn.so")
fi
# ProcessGroupNCCL's header includes nccl.h: from the CUDA toolkit, else the nvidia-nccl wheel.
nccl_include=""
for d in /usr/local/cuda/include /usr/include; do
  if [ -f "$d/nccl.h" ]; then nccl_include="$d"; break; fi
done
if [ -z "$nccl_include" ]; then
  nccl_h="$(find "$site/nvidia" -name nccl.h 2>/dev/null | head -1 || true)"
  if [ -n "$nccl_h" ]; then nccl_include="$(dirname "$nccl_h")"; fi
fi
nccl_args=()
if [ -n "$nccl_include" ]; then nccl_args=(-DCMAKE_CXX_FLAGS="-isystem $nccl_include"); fi

# The architecture of the GPU at hand (LibTorch's CMake would otherwise pick a list of its own).
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-$("$python" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null || echo 9.0)}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DDDPBENCH_DEPS_DIR="$deps" "${cudnn_args[@]}" "${nccl_args[@]}" "$@"
if [ "${DDPBENCH_CONFIGURE_ONLY:-0}" = 1 ]; then
  echo "build-gpu: configured $build_dir against $("$python" -c 'import torch; print("PyTorch", torch.__version__)')"
  exit 0
fi
targets=()
for t in ${DDPBENCH_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" "${targets[@]}"
echo "build-gpu: built $build_dir/ddpbench against $("$python" -c 'import torch; print("PyTorch", torch.__version__)')"
