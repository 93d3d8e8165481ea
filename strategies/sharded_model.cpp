#include "strategies/sharded_model.h"

#include <string>

#include "base/errors.h"

namespace ddpbench {
namespace {

// PyTorch's names: float32, float64, bfloat16, ...
std::string dtype_name(c10::ScalarType type) {
  switch (type) {
    case torch::kFloat: return "float32";
    case torch::kDouble: return "float64";
    case torch::kHalf: return "float16";
    case torch::kBFloat16: return "bfloat16";
    default: return c10::toString(type);
  }
}

}  // namespace

ShardedModel::ShardedModel(WorkloadModel& model, ProcessGroupContext& group, const ShardedUnitOptions& options,
                           const char* strategy)
    : model_(model) {
  // Frozen parameters stay whole on every rank, as buffers do: they have no gradient to
  // reduce-scatter (FSDP2 would shard them too; docs/sharded.md says what that leaves out).
  const auto parameters = model_.trainable_parameters();
  units_ = std::make_unique<ShardedUnits>(parameters, unit_indices(parameters, strategy), group, options);
  model_.set_unit_hooks(this);
}

ShardedModel::~ShardedModel() { model_.set_unit_hooks(nullptr); }

std::vector<torch::Tensor> ShardedModel::full_parameters() {
  auto gathered = units_->gather_full_parameters();
  std::vector<torch::Tensor> out;
  std::size_t next = 0;
  for (const auto& p : model_.distinct_parameters()) out.push_back(p.requires_grad() ? gathered.at(next++) : p);
  return out;
}

void ShardedModel::before_unit(std::size_t workload_unit) {
  const std::size_t unit = sharded_unit_of_.at(workload_unit);
  if (unit != kNoUnit) units_->before_forward(unit);
}

torch::Tensor ShardedModel::after_unit(std::size_t workload_unit, torch::Tensor output) {
  const std::size_t unit = sharded_unit_of_.at(workload_unit);
  if (unit == kNoUnit) return output;
  units_->after_forward(unit);
  // The unit's output gradient arrives before its own backward runs: gather it again there.
  if (output.requires_grad() && torch::GradMode::is_enabled()) {
    output.register_hook([this, unit](const torch::Tensor&) { units_->before_backward(unit); });
  }
  return output;
}

// The workload's wrap units as indices into `parameters` (the rest is the root). A parameter that
// two units name (a tied weight: the embedding's in the first unit, the head's in the last) stays
// with the root, gathered for the whole step: in either unit it would be freed while the other
// still needs it, and sharded twice it would be trained as two copies. A unit is one flat buffer in
// one dtype: a float64 parameter beside float32 ones would be trained in float32 and counted at half
// its bytes, so a unit (or the root) of mixed dtypes is refused, naming it and both dtypes.
std::vector<std::vector<std::size_t>> ShardedModel::unit_indices(const std::vector<torch::Tensor>& parameters,
                                                                 const char* strategy) {
  const std::vector<WrapUnit> named = model_.wrap_units();
  auto units = units_as_sharded(named, parameters);
  // A unit left with nothing runs as part of the root: its hooks do nothing.
  std::vector<std::vector<std::size_t>> kept;
  sharded_unit_of_.assign(units.size(), kNoUnit);
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].empty()) continue;
    sharded_unit_of_[u] = kept.size();
    kept.push_back(std::move(units[u]));
  }

  const auto check = [&](const std::vector<std::size_t>& members, const std::string& name) {
    for (std::size_t k : members) {
      const auto a = parameters[members.front()].scalar_type(), b = parameters[k].scalar_type();
      if (a != b) {
        throw CaseFailure(std::string(strategy) + ": " + name + " holds " + dtype_name(a) + " and " + dtype_name(b) +
                          " parameters, and fsdp keeps a unit in one flat buffer of one dtype (zero1 and zero2 "
                          "bucket by dtype): give the unit one dtype");
      }
    }
  };
  std::vector<char> in_unit(parameters.size(), 0);
  for (std::size_t u = 0; u < kept.size(); ++u) {
    for (std::size_t k : kept[u]) in_unit[k] = 1;
    std::string name = "wrap unit " + std::to_string(u);
    for (std::size_t w = 0; w < sharded_unit_of_.size(); ++w) {
      if (sharded_unit_of_[w] == u && w < named.size()) name = "wrap unit '" + named[w].name + "'";
    }
    check(kept[u], name);
  }
  std::vector<std::size_t> root;
  for (std::size_t k = 0; k < parameters.size(); ++k) {
    if (!in_unit[k]) root.push_back(k);
  }
  check(root, "the root (the parameters in no wrap unit)");
  return kept;
}

}  // namespace ddpbench
