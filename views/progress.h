#pragma once
// A one-line progress display on stderr, only when stderr is a terminal (never in logs or CI).
#include <chrono>
#include <string>

#include "records/result_sink.h"

namespace ddpbench {

class ProgressSink final : public ResultSink {
 public:
  // Draws only if `fd` is a terminal.
  explicit ProgressSink(int fd);
  void on_progress(const std::string& case_name, const std::string& what, int done, int total) override;
  void on_finish(const RunRecord& record) override;

 private:
  void clear();
  int fd_;
  bool enabled_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace ddpbench
