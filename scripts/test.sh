#!/usr/bin/env bash
# The whole test suite: install, build, the C++ tests (CTest + GoogleTest) and the Python tests
# (pytest under Debian's /usr/bin/python3, which sees python3-matplotlib and python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest -j"$jobs" --output-on-failure --timeout 900)
/usr/bin/python3 -m pytest -q tests/python
