#pragma once
// What every pass over a case trains with, built the same way for the parity check and for each
// measured repetition: the workload's dataset (made once per workload), a strategy set up from the
// run's seed, and the loader of its shard of the data.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "data/batch_prefetcher.h"
#include "data/data_loader.h"
#include "devices/device_set.h"
#include "run/run_options.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace ddpbench {

class ProcessGroupContext;

class CaseBuilder {
 public:
  // Keeps references: `options` and `devices` outlive the builder (the runner owns all three).
  CaseBuilder(const RunnerOptions& options, const DeviceSet& devices) : options_(options), devices_(devices) {}
  // This process is one rank of `group`: multi-process strategies are set up on it.
  void set_process_group(ProcessGroupContext* group) { group_ = group; }

  const RunnerOptions& options() const { return options_; }
  const DeviceSet& devices() const { return devices_; }
  ProcessGroupContext* group() const { return group_; }

  // The workload's synthetic dataset (--dataset-size, or 32 global batches), made on first use.
  const Dataset& dataset_for(const Workload& workload, std::int64_t global_batch);
  // A strategy set up for `spec` from the run's seed: the same initial weights for every strategy
  // and repetition. A parity run trains in parity_dtype_of(spec).
  std::unique_ptr<Strategy> start_strategy(const CaseSpec& spec, OptimizerFactory optimizer, int steps,
                                           bool parity_run) const;
  BatchLoader make_loader(const Dataset& dataset, const CaseSpec& spec, const Strategy& strategy,
                          bool pin_memory = false) const;
  // The data path a repetition of `strategy` runs: --data-path resolved (auto: prefetch on CUDA,
  // host on CPU), host where the strategy has no single batch device.
  DataPath data_path_for(const Strategy& strategy) const;
  // What the parity pass of `spec` trains in (precision.h's parity_dtype); asynchronous strategies,
  // compared by loss, train as they are measured.
  c10::ScalarType parity_dtype_of(const CaseSpec& spec) const;

 private:
  const RunnerOptions& options_;
  const DeviceSet& devices_;
  ProcessGroupContext* group_ = nullptr;
  std::map<std::string, Dataset> datasets_;
};

}  // namespace ddpbench
