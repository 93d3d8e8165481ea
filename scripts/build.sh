#!/usr/bin/env bash
# Configures (once) and builds ddpbench and its tests into build/. Incremental: ccache and the
# precompiled header keep a one-line change to one small recompile.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${DDPBENCH_PRESET:-release}"
if [ ! -f build/build.ninja ]; then
  cmake --preset "$preset" >/dev/null
fi
cmake --build build
