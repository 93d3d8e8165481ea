#include "run/case_builder.h"

#include <torch/utils.h>

#include "devices/counting_allocator.h"
#include "run/stop_request.h"

namespace ddpbench {

const Dataset& CaseBuilder::dataset_for(const Workload& workload, std::int64_t global_batch) {
  auto it = datasets_.find(workload.name());
  if (it == datasets_.end()) {
    const std::int64_t size = options_.dataset_size.value_or(32 * global_batch);
    CpuMemoryCounter::DeviceScope host(CpuMemoryCounter::kHost);
    it = datasets_.emplace(workload.name(), workload.make_dataset(size, options_.seed)).first;
  }
  return it->second;
}

std::unique_ptr<Strategy> CaseBuilder::start_strategy(const CaseSpec& spec, OptimizerFactory optimizer, int steps,
                                                      bool parity_run) const {
  const auto& workload = WorkloadRegistry::instance().get(spec.workload);
  torch::manual_seed(options_.seed);  // the same initial weights for every strategy and repetition
  const auto& info = StrategyRegistry::instance().get(spec.strategy);
  auto strategy = info.create();
  StrategySetup setup{workload, spec, devices_, workload.make_model(), std::move(optimizer)};
  if (parity_run) {
    const auto dtype = parity_dtype_of(spec);
    if (dtype != torch::kFloat) set_floating_dtype(*setup.model, dtype);
  }
  setup.options = options_.strategy;
  setup.steps_per_run = steps;
  setup.process_group = info.multi_process ? group_ : nullptr;
  setup.parity_run = parity_run;
  setup.timeout_seconds = options_.timeout_seconds;
  setup.precision = options_.precision;
  setup.stop_requested = [] { return stop_requested(); };
  strategy->setup(setup);
  return strategy;
}

BatchLoader CaseBuilder::make_loader(const Dataset& dataset, const CaseSpec& spec, const Strategy& strategy,
                                     bool pin_memory) const {
  LoaderOptions loader = options_.loader;
  loader.pin_memory = loader.pin_memory || pin_memory;
  return BatchLoader(dataset, EpochSampler(dataset.size(), spec.global_batch, options_.seed, strategy.data_shard()),
                     loader);
}

DataPath CaseBuilder::data_path_for(const Strategy& strategy) const {
  if (!strategy.batch_device()) return DataPath::Host;
  if (options_.data_path == DataPath::Auto) return devices_.is_cuda() ? DataPath::Prefetch : DataPath::Host;
  return options_.data_path;
}

c10::ScalarType CaseBuilder::parity_dtype_of(const CaseSpec& spec) const {
  if (StrategyRegistry::instance().get(spec.strategy).asynchronous) return torch::kFloat;
  return parity_dtype(options_.precision);
}

}  // namespace ddpbench
