#pragma once
// The JSON view of a run: Google Benchmark's layout (a `context` object and a `benchmarks` array of
// per-repetition `iteration` entries and median/mean/stddev/cv `aggregate` entries), with
// everything ddpbench-specific under `ddpbench` keys. PRODUCT.md holds the contract.
#include <nlohmann/json_fwd.hpp>

#include <string>

#include "records/results.h"
#include "records/result_sink.h"

namespace ddpbench {

// Bumped on any change a reader must know about; the report scripts refuse versions they do not know.
constexpr int kJsonSchemaVersion = 1;

nlohmann::json to_json(const RunRecord& record);

// Rewrites the whole file atomically after every update, so a killed run leaves the last complete
// document (with context.ddpbench.complete = false), never a truncated one.
class JsonFileSink final : public ResultSink {
 public:
  explicit JsonFileSink(std::string path) : path_(std::move(path)) {}
  void on_update(const RunRecord& record) override;

 private:
  std::string path_;
};

}  // namespace ddpbench
