#pragma once
// The short "why" per workload: which strategy is fastest, and for every other case the phase
// whose time exceeds the fastest's the most. A pure function of the records; the table and the
// JSON both show its lines.
#include <string>
#include <vector>

#include "records/results.h"

namespace ddpbench {

struct WorkloadExplanation {
  std::string workload;
  std::string fastest;              // case name
  std::vector<std::string> lines;   // one per measured case, the fastest first
};

std::vector<WorkloadExplanation> explain(const RunRecord& record);

}  // namespace ddpbench
