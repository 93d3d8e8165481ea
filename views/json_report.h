#pragma once
// The JSON view of a run: Google Benchmark's layout (a `context` object and a `benchmarks` array of
// per-repetition `iteration` entries and median/mean/stddev/cv `aggregate` entries), with
// everything ddpbench-specific under `ddpbench` keys. PRODUCT.md holds the contract.
#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <optional>
#include <string>

#include "records/results.h"
#include "records/result_sink.h"

namespace ddpbench {

// Bumped on any change a reader must know about; the report scripts refuse versions they do not know.
constexpr int kJsonSchemaVersion = 1;

nlohmann::json to_json(const RunRecord& record);

// Rewrites the whole file atomically after every update, so a killed run leaves the last complete
// document (with context.ddpbench.complete = false), never a truncated one.
// Rewrites the whole file (atomically) at every update. A write that fails (a full disk, a
// file-size limit) leaves the last whole file in place; the sink writes nothing more, keeps the
// message for failure(), and calls `on_failure` once, so the run can stop and keep what it measured.
class JsonFileSink final : public ResultSink {
 public:
  explicit JsonFileSink(std::string path, std::function<void(const std::string&)> on_failure = {})
      : path_(std::move(path)), on_failure_(std::move(on_failure)) {}
  void on_update(const RunRecord& record) override;
  const std::optional<std::string>& failure() const { return failure_; }

 private:
  std::string path_;
  std::function<void(const std::string&)> on_failure_;
  std::optional<std::string> failure_;
};

}  // namespace ddpbench
