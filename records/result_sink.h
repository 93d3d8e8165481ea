#pragma once
// Where a run reports as it goes: the JSON file, the table and the progress line (views/) each
// implement this over the same records, and the runner calls every sink it was given.
#include <string>

#include "records/results.h"

namespace ddpbench {

class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // Called with the whole record after every finished repetition and when a case is settled.
  virtual void on_update(const RunRecord&) {}
  // Called often while a case runs: what runs now.
  virtual void on_progress(const std::string& /*case_name*/, const std::string& /*what*/, int /*done*/,
                           int /*total*/) {}
  virtual void on_finish(const RunRecord&) {}
};

}  // namespace ddpbench
