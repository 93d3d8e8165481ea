#pragma once
// How many repetitions a case takes. A fixed count (--repetitions alone), or adaptive sampling
// (nvbench's stopping on noise, Google Benchmark's min time): repetitions, interleaved with the other
// cases', until the 95% interval over repetitions of the case's lower-quartile step is within
// +-target_precision and it has run min_time_seconds of measured steps, or until max_time_seconds,
// when it stops unresolved and says so.
#include "records/results.h"
#include "run/run_options.h"

namespace ddpbench {

class SamplingPlan {
 public:
  static constexpr int kMaxAdaptiveRepetitions = 1000;

  explicit SamplingPlan(const RunnerOptions& options);

  // Whether a case takes a repetition in round `round`: every round below --repetitions, or,
  // sampling adaptively, until settle() says it is done.
  bool wants_repetition(int round) const;
  // After each repetition: sets the case's achieved precision (and, sampling adaptively, whether it
  // stopped unresolved), and says whether it is done.
  bool settle(CaseRecord& c) const;

 private:
  int repetitions_;
  double target_precision_;
  double min_time_seconds_;
  double max_time_seconds_;
};

}  // namespace ddpbench
