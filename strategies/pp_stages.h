#pragma once
// Where `pp` cuts its model into stages (docs/pipeline.md, "Stages"): at the user's --pp-split, or
// balanced by --pp-balance: each unit's forward + backward time measured on one micro-batch (a short
// profiling pass on rank 0, before any parameter is freed, the cut then the same on every rank), its
// parameters, or its count alone. What each stage got is kept for the JSON and the why line.
#include <cstdint>
#include <string>
#include <vector>

#include "devices/precision.h"
#include "distributed/process_group.h"
#include "pipeline/balance.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace ddpbench {

struct StagePlan {
  pipeline::StageSpans spans;                  // chain units [begin, end) of each stage
  std::string balance;                         // "time", "params", "even" or "split" (--pp-split)
  std::vector<std::int64_t> stage_parameters;  // elements each stage holds: its units, the head on the first, the tail on the last
  std::vector<double> stage_profile_seconds;   // the profiled forward + backward of each stage's units; empty unless "time"
  // Each chain unit's parameter elements (the head's with unit 0, the tail's with the last) and its
  // profiled seconds (empty unless "time"): the figures behind the cut, for a projection to cut again.
  std::vector<std::int64_t> unit_parameters;
  std::vector<double> unit_profile_seconds;
};

// The plan of a case with `stages` stages (ranks x chunks a rank) whose micro-batches have `rows`
// samples. Under "time", rank 0 profiles and every rank receives its figures (a collective on
// `group`: every rank calls this at the same point). `model` is whole, on `device`, and comes back
// as it went in: its buffers (BatchNorm's running statistics), the CPU generator's state (dropout)
// and its gradients (none) are restored after profiling. Throws CaseFailure where --pp-split does
// not fit the chain.
StagePlan plan_stages(WorkloadModel& model, const Workload& workload, const PipelineOptions& options, int stages,
                      std::int64_t rows, const c10::Device& device, Precision precision, ProcessGroupContext& group);

// Each unit's forward + backward seconds on a micro-batch of `rows` samples: the least over the
// passes after one to warm up (at least 3, and until 0.2 s are measured, at most 20), since a busy
// host only adds to a time; the chain's head counts with unit 0, its tail and the loss with the
// last unit, since those stages hold them whatever the cut.
std::vector<double> profile_unit_seconds(WorkloadModel& model, const Workload& workload, std::int64_t rows,
                                         const c10::Device& device, Precision precision);

}  // namespace ddpbench
