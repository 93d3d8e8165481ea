#pragma once
// pp's flags (--pp-schedule, --microbatches, --stages-per-rank, --pp-balance, --pp-split): added to
// the command line, then checked and turned into PipelineOptions. What can be told from the flags
// alone is refused here (UsageError naming the flag); what depends on a workload's chain or batch
// is run/case_plan's (validate_pipeline_flags) or the case's own skip.
#include <optional>
#include <string>

#include "strategies/strategy.h"

namespace CLI {
class App;
}

namespace ddpbench {

struct PipelineFlags {
  std::string schedule, microbatches, stages_per_rank, balance, split;  // as given; empty: not given

  void add_to(CLI::App& app);
  // `runs_pp`: --strategy includes pp; `world_size`: --world-size as given, if it was.
  PipelineOptions apply(bool runs_pp, const std::optional<int>& world_size) const;
};

}  // namespace ddpbench
