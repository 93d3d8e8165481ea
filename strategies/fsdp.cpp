// `fsdp`: ZeRO stage 3 as PyTorch's FSDP runs it: parameters, gradients and optimizer state all
// sharded, one communication group per wrap unit (the workload's units, WorkloadModel::wrap_units).
// Ranks as processes exactly as ddp. A unit's parameters are all-gathered before its forward and
// freed after (--reshard-after-forward, on by default), gathered again before its backward, and its
// gradients reduce-scattered into the ranks' chunks; the next unit's all-gather is prefetched while
// one computes (--no-prefetch: not). Under --dtype bf16 the parameters are gathered in bf16 and the
// gradients reduced in fp32 (FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)),
// where the backend sends bf16. collectives/sharded_units.h holds the mechanics.
#include <unordered_map>

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

  DataShard do_data_shard() const override { return {group_ ? group_->rank() : 0, group_ ? group_->size() : 1}; }
  std::optional<c10::Device> do_batch_device() const override { return device_; }

  void do_setup(const StrategySetup& setup) override {
    if (setup.process_group == nullptr) throw std::logic_error("fsdp runs only inside a rank process");
    group_ = setup.process_group;
    workload_ = &setup.workload;
    global_batch_ = setup.spec.global_batch;
    device_ = setup.devices.device(group_->local_rank());
    model_ = setup.model;
    model_->to(device_);
    model_->train();
    auto parameters = model_->parameters();
    std::vector<torch::Tensor> state = parameters;
    buffers_ = model_->buffers();
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    start_from_rank0_state(state, *group_, "fsdp");

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
    optimizer_ = setup.make_optimizer(units_->parameter_shards());
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
      if (scaler_.enabled()) agree_on_overflow(units_->parameter_shards(), *group_);
      scaler_.step(*optimizer_);
    }
    return global_loss;
  }

  std::vector<torch::Tensor> do_trained_parameters() override { return units_->gather_full_parameters(); }
  // Between steps the model's own parameters have no memory under them (freed units); the chunks
  // are the optimizer's parameters, which held_tensors() counts.
  std::vector<torch::Tensor> do_held_parameters() override { return model_->parameters(); }

  std::optional<CommSummary> do_comm_summary() const override {
    const auto& t = units_->traffic();
    if (t.steps == 0) return std::nullopt;
    const auto steps = static_cast<double>(t.steps);
    CommSummary c;
    c.backend = group_->backend_name();
    c.world_size = group_->size();
    c.buckets = static_cast<int>(units_->unit_count());
    c.bytes_per_step = t.allreduce_bytes / t.steps;
    c.reduce_scatter_bytes_per_step = t.reduce_scatter_bytes / t.steps;
    c.all_gather_bytes_per_step = t.all_gather_bytes / t.steps;
    c.reduce_scatter_seconds_per_step = t.reduce_scatter_seconds / steps;
    c.all_gather_seconds_per_step = t.all_gather_seconds / steps;
    return c;
  }
  void do_reset_measured_stats() override { units_->reset_traffic(); }

 private:
  void before_unit(std::size_t unit) override { units_->before_forward(unit); }
  torch::Tensor after_unit(std::size_t unit, torch::Tensor output) override {
    units_->after_forward(unit);
    // The unit's output gradient arrives before its own backward runs: gather it again there.
    if (output.requires_grad() && torch::GradMode::is_enabled()) {
      output.register_hook([this, unit](const torch::Tensor&) { units_->before_backward(unit); });
    }
    return output;
  }

  // The workload's wrap units as indices into `parameters` (the rest is the root).
  std::vector<std::vector<std::size_t>> unit_indices(const std::vector<torch::Tensor>& parameters) const {
    std::unordered_map<const void*, std::size_t> index;
    for (std::size_t k = 0; k < parameters.size(); ++k) index[parameters[k].unsafeGetTensorImpl()] = k;
    std::vector<std::vector<std::size_t>> units;
    for (const auto& unit : model_->wrap_units()) {
      std::vector<std::size_t> members;
      for (const auto& p : unit.parameters) {
        const auto found = index.find(p.unsafeGetTensorImpl());
        if (found == index.end()) throw std::logic_error("fsdp: wrap unit " + unit.name + " names a tensor that is not a parameter of the model");
        members.push_back(found->second);
      }
      units.push_back(std::move(members));
    }
    return units;
  }

  ProcessGroupContext* group_ = nullptr;
  const Workload* workload_ = nullptr;
  std::int64_t global_batch_ = 1;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<ShardedUnits> units_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"fsdp", "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded; each wrap unit gathered for its forward and backward",
                            7, /*uses_all_devices=*/true, [] { return std::make_unique<FsdpStrategy>(); }, /*multi_process=*/true});

}  // namespace ddpbench
