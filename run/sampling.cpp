#include "run/sampling.h"

#include "base/stats.h"

namespace ddpbench {

SamplingPlan::SamplingPlan(const RunnerOptions& options)
    : repetitions_(options.repetitions),
      target_precision_(options.target_precision),
      min_time_seconds_(options.min_time_seconds),
      max_time_seconds_(options.max_time_seconds) {}

bool SamplingPlan::wants_repetition(int round) const {
  if (target_precision_ <= 0) return round < repetitions_;
  return round < kMaxAdaptiveRepetitions;
}

bool SamplingPlan::settle(CaseRecord& c) const {
  double measured_seconds = 0;
  for (const auto& r : c.repetitions) {
    for (double t : r.step_seconds) measured_seconds += t;
  }
  c.achieved_precision = stats::relative_ci95_half_width(c.repetition_lower_quartiles());
  if (target_precision_ <= 0) return false;  // a fixed count: wants_repetition decides
  const bool enough = static_cast<int>(c.repetitions.size()) >= repetitions_ && measured_seconds >= min_time_seconds_;
  if (enough && c.achieved_precision && *c.achieved_precision <= target_precision_) {
    c.unresolved = false;
    return true;
  }
  // Out of time, or of repetitions: stopped short of the target, and says so.
  c.unresolved = c.seconds_spent >= max_time_seconds_ || static_cast<int>(c.repetitions.size()) >= kMaxAdaptiveRepetitions;
  return c.unresolved;
}

}  // namespace ddpbench
