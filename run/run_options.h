#pragma once
// What a run is asked to do, resolved from the command line (cli/) or a launcher's record
// (cli/options_codec): the cases, how many steps and repetitions, the checks, and the mechanics
// each strategy is given.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_prefetcher.h"
#include "data/data_loader.h"
#include "devices/precision.h"
#include "strategies/strategy.h"
#include "timing/trace.h"

namespace ddpbench {

struct RunnerOptions {
  std::vector<std::string> workloads;
  std::vector<std::string> strategies;
  std::optional<std::int64_t> global_batch;  // none: each workload's default
  std::optional<std::int64_t> sequence_length;  // --seq-len (gpt2's tokens per sample); none: its default
  std::string gpt2_size;                        // --gpt2-size (gpt2's geometry); empty: GPT-2 small
  bool gpt2_plain_loss = false;                 // --gpt2-loss plain (default fused: over chunks of tokens)
  DataPath data_path = DataPath::Auto;          // --data-path; auto: prefetch on CUDA, host on CPU
  std::optional<std::int64_t> dataset_size;  // none: 32 global batches
  int steps = 30;
  int warmup = 5;
  int repetitions = 5;  // with target_precision: the fewest a case runs
  // Adaptive sampling (nvbench's stopping on noise, Google Benchmark's min time): with a target, a
  // case takes repetitions, interleaved with the other cases', until the 95% interval of its step
  // time is within +-target_precision (and it has run min_time_seconds of measured steps), or
  // until it has spent max_time_seconds, when it stops unresolved. 0: exactly `repetitions`.
  double target_precision = 0;
  double min_time_seconds = 0;
  double max_time_seconds = 0;
  std::uint64_t seed = 42;
  int parity_steps = 3;
  double parity_tolerance = 1e-5;
  Precision precision = Precision::Fp32;  // --dtype
  std::optional<double> peak_flops;       // --peak-tflops: one device's peak, in FLOP/s (none: the datasheet's)
  double max_cv = 0.05;  // a case whose repetition means vary more is marked noisy
  // --slow-by: every step sleeps this fraction of its own time before it ends, a slowdown injected
  // where the harness times it, to measure what a CI gate detects. 0 in any real measurement.
  double slow_by = 0;
  LoaderOptions loader;
  double timeout_seconds = 300;
  TraceRecorder* trace = nullptr;  // records the measured steps' ranges when set (--trace)
  StrategyOptions strategy;        // ddp's bucket size, overlap, SyncBatchNorm, checkpoint
};
}  // namespace ddpbench
