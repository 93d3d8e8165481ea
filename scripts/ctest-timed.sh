#!/usr/bin/env bash
# Runs CTest in the current build folder with the given arguments, then prints how long it took and
# its 15 slowest tests (docs/building.md keeps the table of where a CI run's time goes). The exit
# status is CTest's.
#   scripts/ctest-timed.sh LABEL [CTEST ARG...]      (run from the build folder)
set -uo pipefail
label=$1
shift
log=$(mktemp "${TMPDIR:-/tmp}/ddpbench-ctest.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$SECONDS
ctest "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "$label: CTest took $((SECONDS - start)) s"
# CTest's result lines: "  12/409 Test  #34: Suite.Name ......   Passed   41.27 sec"
echo "$label: the 15 slowest tests (seconds, as CTest timed them beside the others at its -j):"
sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +([^ ]+) \.*[^0-9]* ([0-9.]+) sec$/\2 \1/p' "$log" |
  sort -rn | head -n 15 | awk -v l="$label" '{ printf "%s:   %7.1f  %s\n", l, $1, $2 }'
exit "$status"
