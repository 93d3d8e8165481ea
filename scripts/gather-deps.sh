#!/usr/bin/env bash
# Copies what ddpbench needs from Debian packages but a machine without a package registry lacks
# (the GPU machine: it has LibTorch in a PyTorch wheel, nvcc, CMake and ninja, nothing else) into
# one folder: the header-only CLI11, nlohmann/json and NVTX v3, and GoogleTest's sources. Run it here
# after scripts/setup.sh; take the folder along (the device tool's `carry`, or any copy) and pass it
# to scripts/build-gpu.sh. Usage: scripts/gather-deps.sh [DIR]   (default: .deps, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.deps}"
nvtx=""
for d in /usr/local/cuda/include /usr/include; do
  if [ -f "$d/nvtx3/nvToolsExt.h" ]; then nvtx="$d/nvtx3"; break; fi
done
for need in /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp /usr/src/googletest/CMakeLists.txt; do
  if [ ! -f "$need" ]; then
    echo "gather-deps: $need is missing: run scripts/setup.sh first" >&2
    exit 2
  fi
done
rm -rf "$dest.partial"
mkdir -p "$dest.partial/include"
cp -r /usr/include/CLI /usr/include/nlohmann "$dest.partial/include/"
if [ -n "$nvtx" ]; then cp -r "$nvtx" "$dest.partial/include/"; else echo "gather-deps: no NVTX v3 headers here (NVTX ranges will compile to nothing)" >&2; fi
cp -r /usr/src/googletest "$dest.partial/googletest"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "gather-deps: $(du -sh "$dest" | cut -f1) in $dest"
