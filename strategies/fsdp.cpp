// `fsdp`: ZeRO stage 3 as PyTorch's FSDP runs it: parameters, gradients and optimizer state all
// sharded, one communication group per wrap unit (the workload's units, WorkloadModel::wrap_units).
// Ranks as processes exactly as ddp. A unit's parameters are all-gathered before its forward and
// freed after (--reshard-after-forward, on by default), gathered again before its backward, and its
// gradients reduce-scattered into the ranks' chunks; the next unit's all-gather is prefetched while
// one computes (--no-prefetch: not). Under --dtype bf16 the parameters are gathered in bf16 and the
// gradients reduced in fp32 (FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)),
// where the backend sends bf16. collectives/sharded_units.h holds the mechanics, sharded_model.h
// the model's units on them.
#include "base/errors.h"
#include "compat/c10d_compat.h"
#include "distributed/process_group.h"
#include "strategies/rank_state.h"
#include "strategies/sharded_model.h"
#include "strategies/strategy.h"

namespace ddpbench {
namespace {

class FsdpStrategy final : public Strategy {
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
    sharded_ = std::make_unique<ShardedModel>(*model_, *group_, options, "fsdp");
    units_ = &sharded_->units();
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

  std::vector<torch::Tensor> do_trained_parameters() override { return sharded_->full_parameters(); }
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
  ProcessGroupContext* group_ = nullptr;
  const Workload* workload_ = nullptr;
  std::int64_t global_batch_ = 1;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<ShardedModel> sharded_;  // after model_: gone first, and the hooks with it
  ShardedUnits* units_ = nullptr;          // sharded_'s
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"fsdp", "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded; each wrap unit gathered for its forward and backward",
                            7, /*uses_all_devices=*/true, [] { return std::make_unique<FsdpStrategy>(); }, /*multi_process=*/true});

}  // namespace ddpbench
