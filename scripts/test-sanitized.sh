#!/usr/bin/env bash
# The C++ test suite built with AddressSanitizer and UndefinedBehaviorSanitizer (the `sanitize`
# preset, into build-sanitize/), against this machine's LibTorch. Our code is instrumented, LibTorch
# is not; any report ends the process that made it, so the test that ran it fails.
#
# Usage: scripts/test-sanitized.sh [CTEST ARG...]   e.g. -R 'ModelSpec|Cli' for a subset
# Environment: DDPBENCH_BUILD_DIR (default build-sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
export DDPBENCH_PRESET=sanitize
export DDPBENCH_BUILD_DIR="$(pwd)/${DDPBENCH_BUILD_DIR:-build-sanitize}"
./scripts/setup.sh
./scripts/build.sh
# Leaks are not judged: LibTorch keeps its registries and thread pools until exit on purpose, and
# the rank and worker processes the tests start end with _exit. A failed allocation returns null,
# as without ASan, so ddpbench's out-of-memory handling is what is tested. Every report is fatal.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
jobs=$(nproc 2>/dev/null || echo 2)
cd "$DDPBENCH_BUILD_DIR"
ctest -j"$jobs" --output-on-failure --timeout 900 "$@"
