#pragma once
// A model's trainable parameters sharded over a group as FSDP shards them: one ShardedUnits unit
// (collectives/sharded_units.h) per workload wrap unit that holds any, the rest the root, and the
// model's unit hooks driving each unit's gathers around its forward and before its backward. What
// fsdp runs over the world, and the fsdp dimension of a mesh (tp --mesh fsdp=F,tp=T) over its group.
#include <cstddef>
#include <memory>
#include <vector>

#include "collectives/sharded_units.h"
#include "workloads/workload.h"

namespace ddpbench {

class ProcessGroupContext;

class ShardedModel final : private UnitCallHooks {
 public:
  // Shards `model`'s trainable parameters over `group` and installs the hooks. `strategy` names the
  // strategy in the one-line refusal of a unit that mixes dtypes (CaseFailure).
  ShardedModel(WorkloadModel& model, ProcessGroupContext& group, const ShardedUnitOptions& options, const char* strategy);
  ~ShardedModel() override;  // the hooks go with it
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  ShardedUnits& units() { return *units_; }
  const ShardedUnits& units() const { return *units_; }
  // Every distinct parameter's full values in the model's order: the trainable ones gathered (a
  // collective over the group), the frozen ones as they are.
  std::vector<torch::Tensor> full_parameters();

 private:
  void before_unit(std::size_t workload_unit) override;
  torch::Tensor after_unit(std::size_t workload_unit, torch::Tensor output) override;
  std::vector<std::vector<std::size_t>> unit_indices(const std::vector<torch::Tensor>& parameters, const char* strategy);

  WorkloadModel& model_;
  std::unique_ptr<ShardedUnits> units_;
  // The ShardedUnits unit of each of the workload's wrap units (kNoUnit: its parameters are the root's).
  static constexpr std::size_t kNoUnit = static_cast<std::size_t>(-1);
  std::vector<std::size_t> sharded_unit_of_;
};

}  // namespace ddpbench
