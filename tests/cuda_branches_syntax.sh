#!/bin/bash
# The CUDA branches of the three files that have them (DDPBENCH_WITH_CUDA=1, NCCL) compiled for syntax
# against this LibTorch's CUDA headers and the CUDA toolkit's. A CPU-only LibTorch cannot link or
# run them, but they must not rot between visits to a GPU. Exit 77 (CTest's skip) without the
# toolkit's or LibTorch's CUDA headers.
#   cuda_branches_syntax.sh CXX SOURCE_DIR BUILD_DIR CUDA_INCLUDE_DIR TORCH_INCLUDE_DIR...
set -u
cxx=$1 src=$2 build=$3 cuda_include=$4
shift 4
if [ ! -f "$cuda_include/cuda_runtime_api.h" ]; then echo "skip: no CUDA toolkit headers"; exit 77; fi
includes=()
found=0
for dir in "$@"; do
  # The compiler's own search path is left as it is (-isystem /usr/include breaks #include_next).
  case "$dir" in /usr/include | /usr/local/include) ;; *) includes+=(-isystem "$dir") ;; esac
  [ -f "$dir/c10/cuda/CUDAStream.h" ] && found=1
done
if [ "$found" = 0 ]; then echo "skip: this LibTorch ships no c10/cuda headers"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A CPU-only LibTorch leaves out this generated header of its CUDA library's export macros.
mkdir -p "$tmp/c10/cuda/impl"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' >"$tmp/c10/cuda/impl/cuda_cmake_macros.h"
status=0
for file in compat/torch_compat.cpp compat/c10d_compat.cpp compat/cuda_ipc.cpp; do
  if ! "$cxx" -fsyntax-only -std=c++17 -Wall -Wextra -Wno-unused-parameter -Werror \
      -DDDPBENCH_WITH_CUDA=1 -DDDPBENCH_HAVE_NVTX=1 -DUSE_DISTRIBUTED -DUSE_C10D_GLOO -DUSE_C10D_NCCL \
      -I"$src" -I"$build/generated" "${includes[@]}" -isystem "$tmp" -isystem "$cuda_include" "$src/$file"; then
    echo "FAILED: $file with DDPBENCH_WITH_CUDA=1"
    status=1
  fi
done
exit $status
