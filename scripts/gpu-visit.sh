#!/usr/bin/env bash
# One short visit to a GPU machine in one command (the device tool lends some 15 minutes a session,
# every start counted): build against the PyTorch wheel, then the GPU measurements the GPU issue owes,
# one after the other on a few cores, while the rest of the cores build the tests and run the whole
# CTest with no GPU visible (it tests the wheel's CPU paths and must not share the GPU with a
# measurement). No step starts after the deadline and none runs past it; whatever ran leaves its log,
# its JSON and a line in OUTDIR/summary.txt, so a visit cut short still brings back what it measured.
#
# Usage: scripts/gpu-visit.sh OUTDIR
# Environment:
#   GPU_VISIT_DEADLINE   seconds from the start after which nothing runs (default 565: call the device
#                        tool with timeout_s 595; the whole CTest needs some 400 s on 10 cores there,
#                        where 354 s ran 286 of its 353 tests on 2026-11-27)
#   GPU_VISIT_STEPS      which of: env build measure ctest report (default: all of them); also
#                        build-tests: the tests binary built beside the measurements, CTest not run
#                        (a short visit whose measurements run tests with the GPU visible);
#                        ctest-rest: on a machine still warm from a visit whose CTest did not finish,
#                        the tests that no earlier CTest of this build passed, on every core
#   GPU_VISIT_MEASURES   which measurements, in this order (default: gpt2-loss-paths
#                        compare-gpt2-default nccl-wait memory all-bf16; also compare-gpt2-plain
#                        compare-gpt2-fused gpt2 gpt2-pp-tp memory-bucket-view compare-small resnet50
#                        hogwild-cuda-tests compare-hogwild-cuda mesh-nccl)
#   GPU_VISIT_CTEST_COSTS a CTest log of an earlier visit (plain or .gz): CTest runs the tests that
#                        took longest there first, and the tests it lacks before them (those that
#                        were not reached), so that a run cut short leaves the quick ones undone
#   GPU_VISIT_SMOKE=1    every measurement tiny and on the CPU, against DDPBENCH_BUILD_DIR: checks
#                        this script on a machine without a GPU before a visit spends device time
#   GPU_VISIT_CTEST_ARGS more ctest arguments (a smoke check's -R FILTER)
#   GPU_VISIT_HOGWILD_FLAGS compare-hogwild-cuda's flags in place of its default (fewer workers or
#                        rounds on a short visit)
#   DDPBENCH_BUILD_DIR   the build (default build-gpu), PYTHON the interpreter with torch (python3)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${1:?usage: scripts/gpu-visit.sh OUTDIR}"
mkdir -p "$out"
out="$(realpath "$out")"
started=$(date +%s)
deadline="${GPU_VISIT_DEADLINE:-565}"
steps="${GPU_VISIT_STEPS:-env build measure ctest report}"
measures="${GPU_VISIT_MEASURES:-gpt2-loss-paths compare-gpt2-default nccl-wait memory all-bf16}"
smoke="${GPU_VISIT_SMOKE:-0}"
build="${DDPBENCH_BUILD_DIR:-build-gpu}"
python="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
summary="$out/summary.txt"
: >"$summary"

elapsed() { echo $(( $(date +%s) - started )); }
note() { echo "[$(elapsed) s] $*" | tee -a "$summary"; }
has() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# step NAME LIMIT CMD...: CMD with its output in OUTDIR/NAME.log, stopped at LIMIT seconds or at the
# deadline, whichever comes first; a line in the summary either way.
step() {
  local name=$1 limit=$2 remaining
  shift 2
  remaining=$(( deadline - $(elapsed) ))
  if (( remaining < 15 )); then note "$name: not started, the deadline is reached"; return 124; fi
  (( limit > remaining )) && limit=$remaining
  local t0 rc
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  note "$name: rc=$rc in $(( $(date +%s) - t0 )) s$( ((rc == 124)) && echo " (stopped at its limit of $limit s)")"
  return $rc
}

# The cores: the measurements get the first few, the tests' build and CTest the rest.
cores=$(nproc)
measure_cores=$(( cores >= 12 ? 6 : (cores + 1) / 2 ))
measure_cpus="0-$(( measure_cores - 1 ))"
test_cpus="$measure_cores-$(( cores - 1 ))"
test_jobs=$(( cores - measure_cores ))
if (( test_jobs < 1 )); then test_cpus="0-$(( cores - 1 ))"; test_jobs=1; fi

# What each measurement runs (ddpbench flags, or a script); the smoke mode shrinks them for a CPU.
ddpbench=(taskset -c "$measure_cpus" "$build/ddpbench")
pinned=(taskset -c "$measure_cpus")
if [ "$smoke" = 1 ]; then
  gpt2_flags=(--device cpu --batch 2 --seq-len 16 --gpt2-size 2:2:64 --steps 2 --warmup 1)
  gpt2_short_flags=("${gpt2_flags[@]}")
  run_flags=(--device cpu --steps 2 --warmup 1)
  compare_flags=(--device cpu --rounds 1)
  compare_steps=(--steps 2 --warmup 1)
  compare_gpt2_flags=(--seq-len 16 --batch 2 --steps 2 --warmup 1)
  resnet=(32 4)
  resnet_flags="--device cpu --steps 2 --warmup 1"
  loss_paths_flags=(--device cpu --tokens 256 --vocab 1000 --width 32 --chunk-rows 100 --repetitions 2 --warmup 1)
  hogwild_flags=(--device cpu --rounds 1 --steps 3 --warmup 1 --batch 16)
  mesh_flags=(--world-size 4 --mesh dp=2,tp=2 "${gpt2_flags[@]}")
else
  gpt2_flags=(--steps 20 --warmup 5)
  gpt2_short_flags=(--steps 10 --warmup 3)
  run_flags=()
  compare_flags=(--device cuda --rounds 3)
  compare_steps=()
  compare_gpt2_flags=(--steps 20 --warmup 5)
  resnet=(224 64)
  resnet_flags="--steps 10 --warmup 3"
  loss_paths_flags=(--device cuda --kernels 8)
  hogwild_flags=(--device cuda --workers 1,2,4 --rounds 3 --steps 50 --warmup 10 --batch 512)
  if [ -n "${GPU_VISIT_HOGWILD_FLAGS:-}" ]; then read -r -a hogwild_flags <<<"$GPU_VISIT_HOGWILD_FLAGS"; fi
  mesh_flags=(--world-size 1 --mesh dp=1,tp=1 "${gpt2_short_flags[@]}" --dtype bf16)
fi

# The tests binary, built beside the measurements by the CTest part below: a measurement that runs
# tests with the GPU visible waits for it.
tests_built="$out/.tests-built"
wait_for_tests_build() {
  local waited=0
  while [ ! -f "$tests_built" ] && (( waited < 300 && $(elapsed) < deadline - 30 )); do sleep 2; waited=$((waited + 2)); done
  [ -f "$tests_built" ]
}
fixed_reps=(--repetitions 3 --target-precision 0)

measure() {
  case "$1" in
    gpt2)  # MFU in bf16 against one GPU's peak, and the sharded strategies over NCCL at world 1
      step gpt2-bf16 240 "${ddpbench[@]}" --strategy single,ddp,zero1,zero2,fsdp --workload gpt2 --dtype bf16 \
        "${fixed_reps[@]}" "${gpt2_flags[@]}" --json "$out/gpt2-bf16.json" ;;
    gpt2-loss-paths)  # the output projection and loss alone: plain, fused, and fused as it was
      step gpt2-loss-paths 60 "${pinned[@]}" "$python" benchmarks/gpt2_loss_paths.py "${loss_paths_flags[@]}" \
        --json "$out/gpt2-loss-paths.json" ;;
    gpt2-pp-tp)  # pp and tp on one GPU in bf16 (one stage, one share: their CUDA paths over NCCL), beside single
      step gpt2-pp-tp 90 "${ddpbench[@]}" --strategy single,pp,tp --workload gpt2 --dtype bf16 --repetitions 2 \
        --target-precision 0 "${gpt2_short_flags[@]}" --json "$out/gpt2-pp-tp.json" ;;
    nccl-wait)  # the host blocked on every NCCL wait (the default) against only the stream waiting
      step nccl-wait-host 90 env DDPBENCH_NCCL_WAIT=host "${ddpbench[@]}" --strategy single,ddp,tp --workload gpt2 \
        --dtype bf16 --repetitions 2 --target-precision 0 "${gpt2_short_flags[@]}" --json "$out/nccl-wait-host.json"
      step nccl-wait-stream 90 env DDPBENCH_NCCL_WAIT=stream "${ddpbench[@]}" --strategy single,ddp,tp --workload gpt2 \
        --dtype bf16 --repetitions 2 --target-precision 0 "${gpt2_short_flags[@]}" --json "$out/nccl-wait-stream.json" ;;
    memory)  # memory by kind on the caching allocator, every strategy one GPU allows
      step mlp-fp32-all 120 "${ddpbench[@]}" --strategy all --workload mlp "${fixed_reps[@]}" "${run_flags[@]}" \
        --json "$out/mlp-fp32-all.json" ;;
    memory-bucket-view)  # ddp's gradients as views of its buckets: the copy PyTorch's DDP keeps by default, gone
      step mlp-fp32-bucket-view 60 "${ddpbench[@]}" --strategy single,ddp --workload mlp --grad-as-bucket-view \
        "${fixed_reps[@]}" "${run_flags[@]}" --json "$out/mlp-fp32-bucket-view.json" ;;
    compare-gpt2-default | compare-gpt2-plain | compare-gpt2-fused)  # against PyTorch's loop and DDP at world 1, interleaved
      # rounds: default (each side its own loss: ddpbench's fused, nanoGPT's whole logits), or both
      # sides on the same path, plain or fused (ported to the peer), which tells the harness's cost
      # from the loss's.
      local loss=${1#compare-gpt2-}
      step "compare-gpt2-$loss" 180 "${pinned[@]}" "$python" benchmarks/compare_python_api.py --workloads gpt2 \
        --dtype bf16 --gpt2-loss "$loss" "${compare_flags[@]}" "${compare_gpt2_flags[@]}" --build "$build" \
        --python "$python" --json "$out/compare-gpt2-$loss.json" ;;
    resnet50)  # your own model: torchvision's ResNet-50 exported by this machine's torch
      DDPBENCH="$build/ddpbench" PYTHON="$python" \
        DDPBENCH_FLAGS="${fixed_reps[*]} $resnet_flags" \
        step resnet50 180 "${pinned[@]}" benchmarks/own_model.sh "$out/resnet50" "${resnet[@]}" ;;
    compare-small)
      step compare-mlp-transformer 150 "${pinned[@]}" "$python" benchmarks/compare_python_api.py \
        --workloads mlp,transformer "${compare_flags[@]}" --steps 50 --warmup 10 "${compare_steps[@]}" --build "$build" --python "$python" \
        --json "$out/compare-mlp-transformer.json" ;;
    hogwild-cuda-tests)  # hogwild's tests on the GPU (CTest hides it): threads and processes over CUDA IPC
      if wait_for_tests_build; then
        step hogwild-cuda-tests 120 "${pinned[@]}" "$build/tests/ddpbench_tests" \
          --gtest_filter='*Hogwild*cuda*:*HogwildCuda*:*HogwildStrategy.ProcessesMode*'
        grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$out/hogwild-cuda-tests.log" | tee -a "$summary"
      else
        note "hogwild-cuda-tests: not started, the tests binary was not built"
      fi ;;
    compare-hogwild-cuda)  # threads against processes against PyTorch's recipe, 1, 2 and 4 workers on one GPU
      step compare-hogwild-cuda 200 "${pinned[@]}" "$python" benchmarks/compare_hogwild.py "${hogwild_flags[@]}" \
        --build "$build" --python "$python" --json "$out/compare-hogwild-cuda.json" ;;
    mesh-nccl)  # tp on a mesh over NCCL subgroups, stream waits (the default), the collective figures null
      step mesh-nccl 90 "${ddpbench[@]}" --strategy tp --workload gpt2 "${mesh_flags[@]}" --repetitions 2 \
        --target-precision 0 --json "$out/mesh-nccl.json" ;;
    all-bf16)
      step all-workloads-bf16 150 "${ddpbench[@]}" --strategy all --workload all --dtype bf16 --max-time 5 \
        "${run_flags[@]}" --json "$out/all-workloads-bf16.json" ;;
    *) note "unknown measurement $1" ;;
  esac
}

if has env "$steps"; then
  scripts/gpu-check.sh "$out/check" env >/dev/null 2>&1
  cp "$out/check/env.txt" "$out/env.txt" 2>/dev/null
  rm -rf "$out/check"
  note "env: $(sed -n 2p "$out/env.txt" 2>/dev/null); $cores cores: measurements on $measure_cpus, tests on $test_cpus"
fi

if has build "$steps"; then
  # ddpbench first, on every core; the tests are built beside the measurements below.
  if ! DDPBENCH_BUILD_DIR="$build" DDPBENCH_BUILD_TARGETS="ddpbench" step build-ddpbench 300 scripts/build-gpu.sh; then
    grep -m 30 -E "error|Error" "$out/build-ddpbench.log" | tee -a "$summary"
    exit 1
  fi
fi

# CTest's schedule from an earlier visit's log: CTestCostData.txt holds each test's seconds there;
# a test the log lacks gets more than any, so the ones a cut-short run did not reach go first.
order_tests_by_costs() {
  local log=$1 costs="$build/Testing/Temporary/CTestCostData.txt"
  [ -f "$log" ] || { note "ctest: no log $log to order the tests by"; return; }
  mkdir -p "$build/Testing/Temporary"
  (cd "$build" && ctest -N) | sed -n 's/^ *Test *#[0-9]*: //p' >"$out/ctest-names.txt"
  { if [[ "$log" == *.gz ]]; then zcat "$log"; else cat "$log"; fi; } |
    sed -n 's/^.*Test *#[0-9]*: \([^ ]*\) \.*.*Passed *\([0-9.]*\) sec.*$/\1 \2/p' |
    awk -v names="$out/ctest-names.txt" '
      { if (!($1 in t) || $2 > t[$1]) t[$1] = $2 }
      END { while ((getline n < names) > 0) print n, 1, ((n in t) ? t[n] : 1000); print "---" }' >"$costs"
  note "ctest: ordered by $(basename "$log"): $(grep -c " 1000$" "$costs") of $(($(wc -l <"$costs") - 1)) tests not in it, run first"
}

# The numbers of this build's tests that no earlier CTest of it passed (its logs: ctest-*.log in the build).
tests_not_yet_passed() {
  (cd "$build" && ctest -N) | sed -n 's/^ *Test *#\([0-9]*\): .*/\1/p' | sort >"$out/ctest-all.txt"
  cat "$build"/ctest-*.log 2>/dev/null | sed -n 's/^.*Test *#\([0-9]*\): .*Passed.*/\1/p' | sort -u >"$out/ctest-passed.txt"
  comm -23 "$out/ctest-all.txt" "$out/ctest-passed.txt" | sort -n | paste -sd, -
}

tests_pid=""
if has ctest-rest "$steps"; then
  rest="$(tests_not_yet_passed)"
  if [ -z "$rest" ]; then
    note "ctest-rest: every test passed in an earlier run"
  else
    note "ctest-rest: $(echo "$rest" | tr ',' '\n' | wc -l) tests not yet passed"
    (cd "$build" && CUDA_VISIBLE_DEVICES="" DDPBENCH_PYTHON="$(command -v "$python")" step ctest-rest 600 \
      ctest -j "$cores" --output-on-failure --timeout 300 -I "0,0,0,$rest" ${GPU_VISIT_CTEST_ARGS:+$GPU_VISIT_CTEST_ARGS})
    cp "$out/ctest-rest.log" "$build/ctest-rest-$(date +%s).log"
    grep -E "tests passed|tests failed" "$out/ctest-rest.log" | tee -a "$summary"
    grep -E "^\s+[0-9]+ - .*\((Failed|SEGFAULT|Timeout|Subprocess|Child|Exception)" "$out/ctest-rest.log" | cut -c1-160 |
      head -40 | tee -a "$summary"
  fi
fi
if has build-tests "$steps" && ! has ctest "$steps"; then
  (
    if step build-tests 300 taskset -c "$test_cpus" cmake --build "$build" -j "$test_jobs"; then
      touch "$tests_built"
    else
      grep -m 30 -E "error|Error" "$out/build-tests.log" | tee -a "$summary"
    fi
  ) &
  tests_pid=$!
fi
if has ctest "$steps"; then
  (
    if step build-tests 300 taskset -c "$test_cpus" cmake --build "$build" -j "$test_jobs"; then
      touch "$tests_built"
      if [ -n "${GPU_VISIT_CTEST_COSTS:-}" ]; then order_tests_by_costs "$GPU_VISIT_CTEST_COSTS"; fi
      # The two-minute gpt2 parity test included: this is the whole suite. The tests that export
      # models run the exporter with the interpreter that has torch (DDPBENCH_PYTHON), not with
      # /usr/bin/python3, which on the GPU machine has none.
      (cd "$build" && CUDA_VISIBLE_DEVICES="" DDPBENCH_PYTHON="$(command -v "$python")" step ctest 450 \
        taskset -c "$test_cpus" ctest -j "$test_jobs" --output-on-failure --timeout 300 \
        ${GPU_VISIT_CTEST_ARGS:+$GPU_VISIT_CTEST_ARGS})
      cp "$out/ctest.log" "$build/ctest-$(date +%s).log"  # what passed, for a later ctest-rest
      # A failure run again tells one that comes every time from one that came once.
      if grep -q "The following tests FAILED" "$out/ctest.log"; then
        (cd "$build" && CUDA_VISIBLE_DEVICES="" DDPBENCH_PYTHON="$(command -v "$python")" step ctest-rerun 120 \
          taskset -c "$test_cpus" ctest -j "$test_jobs" --rerun-failed --repeat until-fail:3 --output-on-failure)
      fi
      grep -E "tests passed|tests failed" "$out/ctest.log" | tee -a "$summary"
      grep -E "^\s+[0-9]+ - .*\((Failed|SEGFAULT|Timeout|Subprocess|Child|Exception)" "$out/ctest.log" | cut -c1-160 |
        head -40 | tee -a "$summary"
    else
      grep -m 30 -E "error|Error" "$out/build-tests.log" | tee -a "$summary"
    fi
  ) &
  tests_pid=$!
fi

if has measure "$steps"; then
  for m in $measures; do measure "$m"; done
fi

if [ -n "$tests_pid" ]; then wait "$tests_pid"; fi

if has report "$steps"; then
  mapfile -t jsons < <(ls "$out"/gpt2-bf16.json "$out"/mlp-fp32-all.json "$out"/all-workloads-bf16.json \
                          "$out"/resnet50/*-results.json 2>/dev/null)
  if [ ${#jsons[@]} -gt 0 ]; then
    step report 60 "$python" scripts/ddpbench-report "${jsons[@]}" -o "$out/report"
  fi
fi
rm -f "$tests_built"
note "done"
