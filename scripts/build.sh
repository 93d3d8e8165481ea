#!/usr/bin/env bash
# Configures (once) and builds ddpbench and its tests, or only the targets named as arguments
# (scripts/quickstart.sh builds ddpbench and the example plug-in, not the tests). Incremental: ccache
# and the precompiled header keep a one-line change to one small recompile. The build folder is
# build/ unless DDPBENCH_BUILD_DIR names another (scripts/test-libtorch2.sh builds into build-libtorch2/).
#   scripts/build.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${DDPBENCH_PRESET:-release}"
build_dir="${DDPBENCH_BUILD_DIR:-build}"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake --preset "$preset" -B "$build_dir" >/dev/null
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" "${targets[@]}"
