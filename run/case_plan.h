#pragma once
// The plan of a run: the requested workloads x strategies expanded into cases, each with its world
// size, global batch, workload facts and peak rate, or skipped with the reason it cannot run here.
#include <cstdint>
#include <vector>

#include "devices/device_set.h"
#include "records/results.h"
#include "run/run_options.h"
#include "workloads/workload.h"

namespace ddpbench {

class ProcessGroupContext;

// --batch, or the workload's default.
std::int64_t global_batch_for(const RunnerOptions& options, const Workload& workload);

// What can be checked before anything runs (--dtype on this device, the batch against the world
// size, the dataset against the batch, pp's flags against the cases); throws UsageError naming the flag.
void validate_plan(const RunnerOptions& options, const DeviceSet& devices);

// pp's --microbatches, --stages-per-rank or --pp-split where they shape no workload's case of the
// run (the case's own reason, naming the flag); nothing where they shape one. Part of validate_plan.
void validate_pipeline_flags(const RunnerOptions& options, const DeviceSet& devices);

// Every case in the order they run. `group`: this process is one rank of a group, so only
// multi-process strategies run; `has_launcher`: multi-process cases can be handed to rank processes.
std::vector<CaseRecord> plan_cases(const RunnerOptions& options, const DeviceSet& devices,
                                   const ProcessGroupContext* group, bool has_launcher);

}  // namespace ddpbench
