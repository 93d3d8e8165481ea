#pragma once
// The JSON of what a strategy's ranks sent and waited for (json_report's `comm`, `pipeline` and
// `async` objects), apart from the rest of an entry.
#include <nlohmann/json.hpp>

#include <optional>

#include "records/results.h"

namespace ddpbench {

// Bytes, collectives, their time and bus bandwidth, a step; null without communication.
nlohmann::json comm_json(const std::optional<CommSummary>& comm);
// The pipeline that ran and its bubble measured on each rank of `r` beside the formula's.
nlohmann::json pipeline_json(const CommSummary::Pipeline& p, const RepetitionRecord& r);
// An asynchronous strategy's workers: updates and their staleness.
nlohmann::json async_json(const AsyncSummary& a);

}  // namespace ddpbench
