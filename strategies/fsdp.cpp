// `fsdp`: ZeRO stage 3 as PyTorch's FSDP runs it: parameters, gradients and optimizer state all
// sharded, one communication group per wrap unit (the workload's units, WorkloadModel::wrap_units).
// Ranks as processes exactly as ddp. A unit's parameters are all-gathered before its forward and
// freed after (--reshard-after-forward, on by default), gathered again before its backward, and its
// gradients reduce-scattered into the ranks' chunks; the next unit's all-gather is prefetched while
// one computes (--no-prefetch: not). Under --dtype bf16 the parameters are gathered in bf16 and the
// gradients reduced in fp32 (FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)),
// where the backend sends bf16. collectives/sharded_units.h holds the mechanics.
#include <algorithm>
#include <unordered_map>

#include "base/errors.h"
#include "collectives/sharded_units.h"
#include "compat/c10d_compat.h"
#include "distributed/process_group.h"
#include "strategies/rank_state.h"
#include "strategies/strategy.h"

namespace ddpbench {
namespace {

class FsdpStrategy final : public Strategy, private UnitCallHooks {
 public:
  ~FsdpStrategy() override {
    if (model_) model_->set_unit_hooks(nullptr);
  }

 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec&, const DeviceSet& devices,
                                                   const StrategyOptions&) const override {
    if (devices.is_cuda() && !compat::have_nccl()) return "this LibTorch has no NCCL, which fsdp needs on CUDA";
    return std::nullopt;
  }

  // Parameters the root holds are whole on every rank for the whole step: past a quarter of them
  // (a GRU's, which returns a tuple and is no unit; a model of one unit), fsdp's memory and traffic
  // read close to ddp's, and the table says why.
  std::optional<std::string> do_case_note(const CaseSpec&, const WorkloadFacts& facts) const override {
    if (facts.gradient_bytes <= 0 || facts.root_parameter_bytes * 4 <= facts.gradient_bytes) return std::nullopt;
    const auto percent = static_cast<long long>(100.0 * static_cast<double>(facts.root_parameter_bytes) /
                                                    static_cast<double>(facts.gradient_bytes) + 0.5);
    return std::to_string(percent) + "% of the trained parameters stay whole with the root (in no wrap unit, or named by "
           "two), unsharded for the whole step, so its memory and traffic are closer to ddp's; the workload's line "
           "in the JSON (context.ddpbench.settings.workloads) says which and why";
  }
  DataShard do_data_shard() const override { return {group_ ? group_->rank() : 0, group_ ? group_->size() : 1}; }
  std::optional<c10::Device> do_batch_device() const override { return device_; }

  void do_setup(const StrategySetup& setup) override {
    auto placed = place_model_on_rank(setup, "fsdp");
    group_ = placed.group;
    device_ = placed.device;
    model_ = placed.model;
    buffers_ = std::move(placed.buffers);
    workload_ = &setup.workload;
    global_batch_ = setup.spec.global_batch;
    // Frozen parameters stay whole on every rank, as buffers do: they have no gradient to
    // reduce-scatter (FSDP2 would shard them too; docs/sharded.md says what that leaves out).
    const auto parameters = model_->trainable_parameters();

    ShardedUnitOptions options;
    options.reshard_after_forward = setup.options.fsdp.reshard_after_forward;
    options.prefetch = setup.options.fsdp.prefetch;
    options.overlap = setup.options.ddp.overlap;
    // FSDP2's mixed precision: bf16 parameters for the computation, fp32 chunks, optimizer and
    // reduction. 1.13's Gloo cannot send bf16, so there the parameters are gathered in fp32 and
    // autocast casts them (docs/sharded.md says so). A model with BatchNorm too: LibTorch's batch_norm
    // refuses bf16 weights beside its fp32 running statistics, and autocast does not cast it.
    const bool float_model = parameters.front().scalar_type() == torch::kFloat;
    if (setup.precision == Precision::Bf16 && float_model && !setup.workload.has_batch_norm() &&
        (device_.is_cuda() || compat::gloo_sends_bf16())) {
      options.gather_dtype = torch::kBFloat16;
    }
    units_ = std::make_unique<ShardedUnits>(parameters, unit_indices(parameters), *group_, options);
    model_->set_unit_hooks(this);
    // The optimizer sees this rank's chunks only, as zero1's and zero2's (element-wise optimizers).
    optimizer_ = setup.make_optimizer(units_->optimizer_parameters());
    precision_ = setup.precision;
    scaler_ = LossScaler(precision_);
  }

  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) override {
    // Rank 0's buffers first, as ddp: every collective of the step after this goes through units_.
    if (!buffers_.empty()) {
      auto scope = phases.scope(Phase::Replicate);
      group_->broadcast_from_rank0(buffers_, "broadcast of rank 0's buffers");
    }
    {  // the last step's chunks, kept until now: zero_grad, optimizer work (strategy.h)
      auto zero_grad = phases.scope(Phase::Optimizer);
      units_->free_gradients();
    }
    const double share = static_cast<double>(batch.inputs.size(0)) / static_cast<double>(global_batch_);
    units_->begin_step(share, &phases);
    const auto forward = rank_forward(batch, *workload_, *model_, device_, *group_, /*broadcast_buffers=*/{}, precision_,
                                      global_batch_, phases);
    units_->set_loss(forward.loss.detach() * share);
    {
      auto scope = phases.scope(Phase::Backward);
      scaler_.scale(forward.loss).backward();
    }
    const auto global_loss = units_->finish_backward();  // its wait is the exposed reduce-scatter
    {
      auto scope = phases.scope(Phase::Optimizer);
      if (scaler_.enabled()) agree_on_overflow(units_->optimizer_parameters(), device_, *group_);
      scaler_.step(*optimizer_);
    }
    return global_loss;
  }

  std::vector<torch::Tensor> do_trained_parameters() override {
    // The trainable ones gathered, the frozen ones as they are, in the model's order.
    auto gathered = units_->gather_full_parameters();
    std::vector<torch::Tensor> out;
    std::size_t next = 0;
    for (const auto& p : model_->distinct_parameters()) out.push_back(p.requires_grad() ? gathered.at(next++) : p);
    return out;
  }
  // Between steps the model's own parameters have no memory under them (freed units); the chunks
  // are the optimizer's parameters, which held_tensors() counts.
  std::vector<torch::Tensor> do_held_parameters() override { return model_->distinct_parameters(); }

  std::optional<CommSummary> do_comm_summary() const override {
    const auto& t = units_->traffic();
    if (t.steps == 0) return std::nullopt;
    const auto steps = static_cast<double>(t.steps);
    CommSummary c;
    c.backend = group_->backend_name();
    c.collective_seconds_measured = group_->host_waits_for_collectives();
    c.world_size = group_->size();
    c.buckets = static_cast<int>(units_->unit_count());
    c.bytes_per_step = t.allreduce_bytes / t.steps;
    c.reduce_scatter_bytes_per_step = t.reduce_scatter_bytes / t.steps;
    c.all_gather_bytes_per_step = t.all_gather_bytes / t.steps;
    c.reduce_scatter_seconds_per_step = t.reduce_scatter_seconds / steps;
    c.all_gather_seconds_per_step = t.all_gather_seconds / steps;
    for (std::size_t u = 0; u < units_->unit_count(); ++u) c.units.push_back({units_->unit_bytes(u), units_->unit_is_root(u)});
    return c;
  }
  void do_reset_measured_stats() override { units_->reset_traffic(); }

 private:
  void before_unit(std::size_t workload_unit) override {
    const std::size_t unit = sharded_unit_of_.at(workload_unit);
    if (unit != kNoUnit) units_->before_forward(unit);
  }
  torch::Tensor after_unit(std::size_t workload_unit, torch::Tensor output) override {
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
  // still needs it, and sharded twice it would be trained as two copies.
  std::vector<std::vector<std::size_t>> unit_indices(const std::vector<torch::Tensor>& parameters) {
    const std::vector<WrapUnit> named = model_->wrap_units();
    auto units = units_as_sharded(named, parameters);
    // A unit left with nothing runs as part of the root: its hooks do nothing.
    std::vector<std::vector<std::size_t>> kept;
    sharded_unit_of_.assign(units.size(), kNoUnit);
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].empty()) continue;
      sharded_unit_of_[u] = kept.size();
      kept.push_back(std::move(units[u]));
    }
    refuse_mixed_dtypes(parameters, kept, named);
    return kept;
  }

  // PyTorch's names: float32, float64, bfloat16, ...
  static std::string dtype_name(c10::ScalarType type) {
    switch (type) {
      case torch::kFloat: return "float32";
      case torch::kDouble: return "float64";
      case torch::kHalf: return "float16";
      case torch::kBFloat16: return "bfloat16";
      default: return c10::toString(type);
    }
  }
  // A unit is one flat buffer in one dtype: a float64 parameter beside float32 ones would be trained
  // in float32 and counted at half its bytes. Refused, naming the unit and both dtypes.
  void refuse_mixed_dtypes(const std::vector<torch::Tensor>& parameters, const std::vector<std::vector<std::size_t>>& units,
                           const std::vector<WrapUnit>& named) const {
    std::vector<char> in_unit(parameters.size(), 0);
    const auto check = [&](const std::vector<std::size_t>& members, const std::string& name) {
      for (std::size_t k : members) {
        const auto a = parameters[members.front()].scalar_type(), b = parameters[k].scalar_type();
        if (a != b) {
          throw CaseFailure("fsdp: " + name + " holds " + dtype_name(a) + " and " + dtype_name(b) +
                            " parameters, and fsdp keeps a unit in one flat buffer of one dtype (zero1 and zero2 "
                            "bucket by dtype): give the unit one dtype");
        }
      }
    };
    for (std::size_t u = 0; u < units.size(); ++u) {
      for (std::size_t k : units[u]) in_unit[k] = 1;
      std::string name = "wrap unit " + std::to_string(u);
      for (std::size_t w = 0; w < sharded_unit_of_.size(); ++w) {
        if (sharded_unit_of_[w] == u && w < named.size()) name = "wrap unit '" + named[w].name + "'";
      }
      check(units[u], name);
    }
    std::vector<std::size_t> root;
    for (std::size_t k = 0; k < parameters.size(); ++k) {
      if (!in_unit[k]) root.push_back(k);
    }
    check(root, "the root (the parameters in no wrap unit)");
  }

  ProcessGroupContext* group_ = nullptr;
  const Workload* workload_ = nullptr;
  std::int64_t global_batch_ = 1;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<ShardedUnits> units_;
  // The ShardedUnits unit of each of the workload's wrap units (kNoUnit: its parameters are the root's).
  static constexpr std::size_t kNoUnit = static_cast<std::size_t>(-1);
  std::vector<std::size_t> sharded_unit_of_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"fsdp", "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded; each wrap unit gathered for its forward and backward",
                            7, /*uses_all_devices=*/true, [] { return std::make_unique<FsdpStrategy>(); }, /*multi_process=*/true});

}  // namespace ddpbench
