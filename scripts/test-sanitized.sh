#!/usr/bin/env bash
# The C++ test suite built with AddressSanitizer and UndefinedBehaviorSanitizer (the `sanitize`
# preset, into build-sanitize/), against this machine's LibTorch. Our code is instrumented, LibTorch
# is not; any report ends the process that made it, so the test that ran it fails.
#
# By default it runs the suite less the tests listed in SANITIZED_LEG_LEAVES_OUT below: those run
# no instrumented code that a test it keeps does not run too (docs/building.md has the measurement
# and the reasons). CI's sanitized leg is this default; --all runs every test.
#
# Usage: scripts/test-sanitized.sh [--all] [CTEST ARG...]   e.g. -R 'ModelSpec|Cli' for a subset
# Environment: DDPBENCH_BUILD_DIR (default build-sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
if [ "${1:-}" = "--all" ]; then all=1; shift; fi
export DDPBENCH_PRESET=sanitize
export DDPBENCH_BUILD_DIR="$(pwd)/${DDPBENCH_BUILD_DIR:-build-sanitize}"
./scripts/setup.sh
if [ "$all" = 1 ]; then
  ./scripts/build.sh
else
  # The tests and what they run (ddpbench, the plug-ins): the benchmarks serve only tests this leg
  # leaves to the plain legs (StdBindings, pytest).
  ./scripts/build.sh ddpbench_tests
fi
# Leaks are not judged: LibTorch keeps its registries and thread pools until exit on purpose, and
# the rank and worker processes the tests start end with _exit. A failed allocation returns null,
# as without ASan, so ddpbench's out-of-memory handling is what is tested. Every report is fatal.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# What the sanitized leg leaves to the two plain legs, each with why a sanitizer adds nothing there.
SANITIZED_LEG_LEAVES_OUT=(
  # Build checks: they compile or link-inspect with the system's tools; no code of ours runs.
  'GpuBuildPath\..*'
  'CudaBranches\..*'
  'StdBindings\..*'
  'Layering\..*'
  # ddp across two network namespaces: the launch path of DdpExternalLaunch.* (kept) with another
  # MASTER_ADDR; what differs is the kernel's routing, not our code.
  'DdpTwoNodes\..*'
  # A TorchScript ResNet-18 and the example plug-in under every strategy: the strategies run under
  # EveryStrategy.* (kept) on every built-in workload, the scripted model's code under
  # ScriptedModel.FsdpGathersEachUnitAlone... and NextTokenAndRegressionTargets... (kept), the
  # plug-in loader under WorkloadPlugin.ATakenNameOrAThrowingConstructor... (kept).
  'ScriptedModel\.ResNet18UnderEveryStrategyMatchesSingle'
  'WorkloadPlugin\.TheExampleRunsUnderEveryStrategyInRanksAndWorkers'
  # Every strategy once more through the CLI to compare the JSON's shape with the golden file: the
  # JSON writer runs under JsonReport.JsonHoldsTheContractsValues (kept), the strategies as above.
  'JsonReport\.JsonMatchesTheGoldenShape'
  # The conformance suite's multi-rank strategies on every built-in workload (40-47 s each under
  # ASan): their code runs under the sanitizers in Gpt2UnderEveryStrategy.*, ComputesInBf16...*,
  # and their own files' parity, memory and fault tests (kept); what the four workloads add is the
  # conformance checks themselves, which the plain legs run.
  'Registered/EveryStrategy\.RunsOrSaysWhyNotOnEveryWorkload/(ddp|zero1|zero2|fsdp)'
  # A hung rank killed by the launcher's watchdog: the same launcher code for every multi-rank
  # strategy; DdpRun.HungRankIsKilledWithinTheTimeoutAndNamed (kept) runs it, these wait out the
  # same timeout for zero1/zero2 and fsdp.
  'ZeroRun\.HungRankIsKilledWithinTheTimeoutAndNamed'
  'FsdpRun\.HungRankIsKilledWithinTheTimeoutAndNamed'
  # The bytes zero and fsdp send, end to end through the command line: the counters that hold them
  # run under ShardedBuckets.TrafficCountsThePaddedBucketsEachWayAndTheLoss and
  # ShardedUnits.AllGathersEachUnitTwiceAStep... (kept), and the strategies in their parity tests.
  'ZeroRun\.SendsWhatDdpSendsWithinThePaddingAndShowsTheExposedCollectivesAsPhases'
  'FsdpRun\.SendsOneAndAHalfTimesDdpsBytesWithReshardingAfterForwardAndOnceWithout'
  # zero's and fsdp's float64 parity at world 4: world 2 (shards even) and world 3 (shards padded)
  # run the same code, which world 4 runs again with other sizes.
  'World/ZeroParity\.BothStagesMatchSingleInFloat64/world4'
  'Settings/FsdpParity\.MatchesSingleInFloat64/world4'
  # zero1 in bf16: zero1 is zero2 keeping its full gradients (one flag of zero_data_parallel.cpp);
  # under bf16 its gradients are float32 as in its own float32 tests (kept), and the bf16 forward is
  # zero2's (kept).
  'Registered/EveryStrategy\.ComputesInBf16UnderDtypeBf16AndStillMatchesSingle/zero1'
  # single on exported models held to PyTorch's own loop: the shapes' registration (tied, frozen,
  # buffers of several dtypes) runs under ModelShapes.* (kept), which trains the same shapes under
  # every strategy; what these add is Python's loop, which no sanitizer instruments.
  'Shapes/ReferenceLoop\..*'
  # The memory levers under the multi-rank strategies: the levers' own code (checkpointed units,
  # micro-batches) runs under the sanitizers in the single-process strategies' cases (kept),
  # ActivationCheckpointing.*, DdpRun.Accumulates... and FsdpRun.Accumulates... (kept); the
  # strategies' code in their own tests. What these add is parity per strategy, which the plain
  # legs check.
  'Registered/(CheckpointedUnderEveryStrategy|AccumulatedUnderEveryStrategy)\..*/(ddp|zero1|zero2|fsdp|pp|tp)'
)
args=()
if [ "$all" = 0 ]; then
  pattern=$(IFS='|'; echo "${SANITIZED_LEG_LEAVES_OUT[*]}")
  args=(-E "^($pattern)\$")
  echo "test-sanitized: leaving ${#SANITIZED_LEG_LEAVES_OUT[@]} patterns of tests to the plain legs (--all runs them too)"
fi
jobs=$(nproc 2>/dev/null || echo 2)
cd "$DDPBENCH_BUILD_DIR"
"$OLDPWD/scripts/ctest-timed.sh" test-sanitized -j"$jobs" --output-on-failure --timeout 900 "${args[@]}" "$@"
