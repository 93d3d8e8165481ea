#pragma once
// The terminal view of a run: one row per case with the same numbers the JSON holds.
#include <ostream>
#include <string>

#include "records/results.h"
#include "records/result_sink.h"

namespace ddpbench {

std::string format_table(const RunRecord& record);

class TableSink final : public ResultSink {
 public:
  explicit TableSink(std::ostream& out) : out_(out) {}
  void on_finish(const RunRecord& record) override;

 private:
  std::ostream& out_;
};

}  // namespace ddpbench
