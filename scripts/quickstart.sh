#!/usr/bin/env bash
# The main job for a newcomer: install, build, then run every strategy on the default workload
# (CUDA when present, CPU virtual devices otherwise), print the table and write the JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
mkdir -p results
exec ./build/ddpbench --strategy all --json results/ddpbench.json "$@"
