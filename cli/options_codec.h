#pragma once
// The resolved options of a run as one JSON record: what ddpbench's launcher hands each rank process
// it starts (--rank-options), instead of a command line rebuilt flag by flag, where a flag forgotten
// in the rebuild would silently run with its default in the ranks. Every field of RunnerOptions
// travels except those that are the launching process's own (the trace recorder, the worker
// executable's path); tests/cli/test_options_codec.cpp checks that every flag of --help survives the trip.
#include <string>

#include "devices/device_set.h"
#include "run/run_options.h"
#include "models/workload_sources.h"

namespace ddpbench {

struct RankOptions {
  RunnerOptions runner;
  DeviceRequest devices;
  WorkloadSources sources;  // the models and plug-in libraries to load before anything else
};

std::string encode_rank_options(const RankOptions& options);
// Throws UsageError naming --rank-options on a malformed record.
RankOptions decode_rank_options(const std::string& text);

}  // namespace ddpbench
