#pragma once
// What a pass over a case (the parity check, a measured repetition) tells the run while it steps.
// The runner listens: the --timeout watchdog's clock, the step count a launcher's rank 0 keeps in
// the store, and the sinks' progress line.
#include <string>

namespace ddpbench {

class StepListener {
 public:
  virtual ~StepListener() = default;
  // A step began or ended: the watchdog's clock restarts.
  virtual void on_step_activity() = 0;
  // A step finished: on_step_activity(), and rank 0 of a launcher's task counts it in the store.
  virtual void on_step_finished() = 0;
  // What runs now, for the progress line: "warm-up", "rep 2/5", ...; `done` of `total` steps.
  virtual void on_progress(const std::string& case_name, const std::string& what, int done, int total) = 0;
};

}  // namespace ddpbench
