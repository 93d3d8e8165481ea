#!/usr/bin/env bash
# What a GPU machine proves, in one go: builds against the PyTorch wheel's LibTorch
# (scripts/build-gpu.sh, .deps/ from scripts/gather-deps.sh), runs the whole C++ suite there, then
# `ddpbench --strategy all --workload all` in fp32, bf16 and fp16 and the report of the three, and
# counts the warning lines each run printed. Everything lands in OUTDIR: the machine's description,
# one log per step, the JSON files and the report; the last lines printed are a summary.
# Usage: scripts/gpu-check.sh OUTDIR [STEP...]   STEP: env build ctest runs report (default: all)
# Environment: GPU_CHECK_CTEST_TIMEOUT (seconds for the whole ctest, default 300),
#   GPU_CHECK_RUN_TIMEOUT (seconds for each run, default 180), GPU_CHECK_DTYPES (the runs' dtypes,
#   default "fp32 bf16 fp16"), GPU_CHECK_RUN_FLAGS (extra ddpbench flags for the runs, default none).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/gpu-check.sh OUTDIR [STEP...]}"
shift
steps="${*:-env build ctest runs report}"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { case " $steps " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
python="${PYTHON:-python3}"

if has env; then
  {
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    nproc; free -g | head -2; uname -r
    g++ --version | head -1; cmake --version | head -1; nvcc --version | tail -1
  } >"$out/env.txt" 2>&1
  note "env: $(sed -n 3p "$out/env.txt")"
fi

if has build; then
  started=$(date +%s)
  if ./scripts/build-gpu.sh >"$out/build.log" 2>&1; then
    note "build: ok in $(( $(date +%s) - started )) s ($(grep -c 'warning:' "$out/build.log") compiler warnings)"
  else
    note "build: FAILED after $(( $(date +%s) - started )) s (build.log)"
    grep -m 20 -E "error|Error" "$out/build.log" | tee -a "$summary"
    exit 1
  fi
fi

if has ctest; then
  started=$(date +%s)
  # The model-export tests need the interpreter that has torch, not /usr/bin/python3.
  (cd build-gpu && DDPBENCH_PYTHON="$(command -v "$python")" timeout "${GPU_CHECK_CTEST_TIMEOUT:-300}" ctest -j"$(nproc)" --output-on-failure --timeout 240) >"$out/ctest.log" 2>&1
  note "ctest: rc=$? in $(( $(date +%s) - started )) s: $(grep -E 'tests passed|tests failed' "$out/ctest.log")"
  grep -E "^\s+[0-9]+ - .*\((Failed|SEGFAULT|Timeout|Subprocess|Child|Exception)" "$out/ctest.log" | cut -c1-160 | head -40 |
    tee -a "$summary"
fi

if has runs; then
  for dtype in ${GPU_CHECK_DTYPES:-fp32 bf16 fp16}; do
    started=$(date +%s)
    # shellcheck disable=SC2086
    timeout "${GPU_CHECK_RUN_TIMEOUT:-180}" ./build-gpu/ddpbench --strategy all --workload all --dtype "$dtype" --json "$out/all-workloads-$dtype.json" \
      ${GPU_CHECK_RUN_FLAGS:-} >"$out/run-$dtype.out" 2>"$out/run-$dtype.err"
    rc=$?
    warnings=$(grep -ciE "warn" "$out/run-$dtype.err")
    note "run $dtype: rc=$rc in $(( $(date +%s) - started )) s, $warnings warning line(s) on stderr"
    grep -iE "warn" "$out/run-$dtype.err" | sort | uniq -c | head -5 | tee -a "$summary"
  done
fi

if has report; then
  /usr/bin/env "$python" scripts/ddpbench-report "$out"/all-workloads-*.json -o "$out/report" >"$out/report.log" 2>&1
  note "report: rc=$? ($(ls "$out/report" 2>/dev/null | wc -l) files)"
fi
