#!/usr/bin/env bash
# Copies what ddpbench needs from Debian packages but a machine without a package registry lacks
# (the GPU machine: it has LibTorch in a PyTorch wheel, nvcc, CMake and ninja, nothing else) into
# one folder: the header-only CLI11, nlohmann/json and NVTX v3, GoogleTest's sources, and Gloo's
# headers (the wheel compiles Gloo into libtorch_cpu but ships none of its headers, which c10d's
# ProcessGroupGloo.hpp includes; Debian trixie's libgloo-dev is the snapshot checked against the
# 2.x wheels). Run it here after scripts/setup.sh; take the folder along (the device tool's
# `carry`, or any copy) and pass it to scripts/build-gpu.sh.
# Usage: scripts/gather-deps.sh [DIR]   (default: .deps, git-ignored)
# Environment: DDPBENCH_DEBIAN_MIRROR (default http://deb.debian.org/debian) for libgloo-dev;
#   DDPBENCH_GLOO_HEADERS=DIR copies Gloo's headers from DIR (a gloo/ folder) instead of downloading
#   them (inside the trixie root, /usr/include/gloo is that same package's).
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

if [ -n "${DDPBENCH_GLOO_HEADERS:-}" ]; then
  if [ ! -f "$DDPBENCH_GLOO_HEADERS/algorithm.h" ]; then
    echo "gather-deps: DDPBENCH_GLOO_HEADERS=$DDPBENCH_GLOO_HEADERS holds no Gloo headers (algorithm.h)" >&2
    rm -rf "$dest.partial"
    exit 2
  fi
  gloo_from="$DDPBENCH_GLOO_HEADERS"
else
  # Gloo's headers from trixie's libgloo-dev, fetched with apt state of our own (a private package
  # list and cache), so the machine's own apt sources stay as they are.
  mirror="${DDPBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  apt_dir="$(mktemp -d)"
  trap 'rm -rf "$apt_dir"' EXIT
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/deb"
  echo "deb $mirror trixie main" >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
  if ! apt-get "${apt_opts[@]}" update -qq >"$apt_dir/log" 2>&1 ||
     ! (cd "$apt_dir/deb" && apt-get "${apt_opts[@]}" download libgloo-dev >>"$apt_dir/log" 2>&1); then
    tail -n 5 "$apt_dir/log" >&2
    echo "gather-deps: cannot download Debian trixie's libgloo-dev from $mirror" >&2
    rm -rf "$dest.partial"
    exit 1
  fi
  dpkg-deb -x "$apt_dir"/deb/libgloo-dev_*.deb "$apt_dir/gloo"
  gloo_from="$apt_dir/gloo/usr/include/gloo"
  echo "gather-deps: Gloo headers from $(basename "$apt_dir"/deb/libgloo-dev_*.deb)"
fi
cp -r "$gloo_from" "$dest.partial/include/gloo"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "gather-deps: $(du -sh "$dest" | cut -f1) in $dest"
