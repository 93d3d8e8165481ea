#!/usr/bin/env bash
# The main job for a newcomer: install, build ddpbench (and the example plug-in; the tests are built
# by the test command), then run every strategy on the default workload (CUDA when present, CPU
# virtual devices otherwise), print the table, write the JSON and the HTML report
# (results/report/index.html).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh ddpbench ddpbench_example_plugin
mkdir -p results
status=0
./build/ddpbench --strategy all --json results/ddpbench.json "$@" || status=$?
# The report is written from whatever was measured, also when a case failed (exit 1).
if [ -f results/ddpbench.json ] && [ "$status" -ne 2 ]; then
  ./scripts/ddpbench-report results/ddpbench.json -o results/report
fi
exit "$status"
