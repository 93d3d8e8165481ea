#!/usr/bin/env bash
# The test suite against this machine's LibTorch (all of it against 2.x; see below for 1.x): install, build, the C++ tests (CTest +
# GoogleTest) and the Python tests (pytest under Debian's /usr/bin/python3, which sees
# python3-matplotlib and python3-torch). scripts/test-libtorch2.sh runs this same script inside a
# Debian trixie root, against LibTorch 2.6. DDPBENCH_BUILD_DIR picks the build folder (build/).
#
# Against a LibTorch 1.x it leaves out the tests listed in LIBTORCH1_LEG_LEAVES_OUT below, which
# the 2.x leg runs (LibTorch 2.x is what users have; each entry says why 1.x adds nothing there);
# --all runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
if [ "${1:-}" = "--all" ]; then all=1; shift; fi
export DDPBENCH_BUILD_DIR="$(pwd)/${DDPBENCH_BUILD_DIR:-build}"
./scripts/setup.sh
./scripts/build.sh
echo "test: set up and built in ${SECONDS} s"
LIBTORCH1_LEG_LEAVES_OUT=(
  # The four-workload conformance matrix of the multi-rank strategies (its wide-logits and convnet
  # cases are most of CTest's time): on 1.x each strategy still runs its own test file's parity,
  # memory and fault tests, the bf16 and gpt2 matrices and the memory levers' matrices on mlp,
  # transformer and gpt2; what the matrix adds on 1.x is the same strategy code on two more models.
  'Registered/EveryStrategy\.RunsOrSaysWhyNotOnEveryWorkload/(ddp|zero1|zero2|fsdp|pp|tp)'
  # Our own code's shape, not LibTorch's: the command line's refusals (one line, exit 2, before
  # LibTorch computes anything) and the JSON's shape against the golden file.
  'Cli/BadInputTest\.\*'
  'JsonReport\.JsonMatchesTheGoldenShape'
  # The GPU machine's build path: its PyTorch wheel is 2.x, which the 2.x leg's gathered
  # dependencies stand for; no GPU build uses LibTorch 1.x.
  'GpuBuildPath\..*'
  'CudaBranches\..*'
)
args=()
version=$("$DDPBENCH_BUILD_DIR/ddpbench" --version)
if [ "$all" = 0 ] && [[ "$version" == *"LibTorch 1."* ]]; then
  pattern=$(IFS='|'; echo "${LIBTORCH1_LEG_LEAVES_OUT[*]}")
  args=(-E "^($pattern)\$")
  echo "test: LibTorch 1.x: leaving ${#LIBTORCH1_LEG_LEAVES_OUT[@]} patterns of tests to the 2.x leg (--all runs them too)"
fi
jobs=$(nproc 2>/dev/null || echo 2)
(cd "$DDPBENCH_BUILD_DIR" && "$OLDPWD/scripts/ctest-timed.sh" test -j"$jobs" --output-on-failure --timeout 900 "${args[@]}")
start=$SECONDS
# One worker a core, each test file whole on one worker (its module fixtures, real ddpbench runs, made once).
/usr/bin/python3 -m pytest -q -n "$jobs" --dist loadfile --durations=15 tests/python
echo "test: pytest took $((SECONDS - start)) s"
