#!/usr/bin/env bash
# The whole test suite against this machine's LibTorch: install, build, the C++ tests (CTest +
# GoogleTest) and the Python tests (pytest under Debian's /usr/bin/python3, which sees
# python3-matplotlib and python3-torch). scripts/test-libtorch2.sh runs this same script inside a
# Debian trixie root, against LibTorch 2.6. DDPBENCH_BUILD_DIR picks the build folder (build/).
set -euo pipefail
cd "$(dirname "$0")/.."
export DDPBENCH_BUILD_DIR="$(pwd)/${DDPBENCH_BUILD_DIR:-build}"
./scripts/setup.sh
./scripts/build.sh
echo "test: set up and built in ${SECONDS} s"
jobs=$(nproc 2>/dev/null || echo 2)
(cd "$DDPBENCH_BUILD_DIR" && "$OLDPWD/scripts/ctest-timed.sh" test -j"$jobs" --output-on-failure --timeout 900)
start=$SECONDS
# One worker a core, each test file whole on one worker (its module fixtures, real ddpbench runs, made once).
/usr/bin/python3 -m pytest -q -n "$jobs" --dist loadfile --durations=15 tests/python
echo "test: pytest took $((SECONDS - start)) s"
