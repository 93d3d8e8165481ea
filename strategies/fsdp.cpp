// `fsdp`: ZeRO stage 3 as PyTorch's FSDP runs it: parameters, gradients and optimizer state all
// sharded, one communication group per wrap unit (the workload's units, WorkloadModel::wrap_units).
// Ranks as processes exactly as ddp. A unit's parameters are all-gathered before its forward and
// freed after (--reshard-after-forward, on by default), gathered again before its backward, and its
// gradients reduce-scattered into the ranks' chunks; the next unit's all-gather is prefetched while
// one computes (--no-prefetch: not). Under --dtype bf16 the parameters are gathered in bf16 and the
// gradients reduced in fp32 (FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)),
// where the backend sends bf16. collectives/sharded_units.h holds the mechanics, sharded_model.h
// the model's units on them.
#include <algorithm>

#include "base/errors.h"
#include "compat/c10d_compat.h"
#include "distributed/process_group.h"
#include "strategies/microbatches.h"
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
    grad_accum_ = setup.options.levers.grad_accum;
    // --no-sync-accum: the units' unsharded gradient buffers live from the first micro-batch to the
    // one reduce-scatter after the last (FSDP2's set_requires_gradient_sync(False)).
    options.gradients_at_finish = grad_accum_ > 1 && setup.options.levers.no_sync_accum;
    if (setup.precision == Precision::Bf16 && float_model && !setup.workload.has_batch_norm() &&
        (device_.is_cuda() || compat::gloo_sends_bf16()) && !options.gradients_at_finish) {
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
    // --grad-accum: by default each micro-batch is a round of its own (gathers, backward, each unit's
    // reduce-scatter added into its chunk), FSDP2's default; under --no-sync-accum one round holds
    // every micro-batch, the units' unsharded gradients summing until the one reduce-scatter.
    const auto micro = split_microbatches(batch, grad_accum_);
    const bool one_round = micro.size() == 1 || units_->gradients_at_finish();
    torch::Tensor global_loss, rank_loss;
    for (std::size_t k = 0; k < micro.size(); ++k) {
      if (!one_round || k == 0) units_->begin_step(share, &phases, /*add_to_gradients=*/k > 0);
      const auto forward = rank_forward(micro[k].batch, *workload_, *model_, device_, *group_, /*broadcast_buffers=*/{},
                                        precision_, global_batch_, phases);
      const auto loss = micro.size() > 1 ? forward.loss * micro[k].weight : forward.loss;
      rank_loss = rank_loss.defined() && one_round ? rank_loss + loss.detach() : loss.detach();
      if (!one_round || k + 1 == micro.size()) units_->set_loss(rank_loss * share);
      {
        auto scope = phases.scope(Phase::Backward);
        scaler_.scale(loss).backward();
      }
      if (!one_round || k + 1 == micro.size()) {
        const auto round_loss = units_->finish_backward();  // its wait is the exposed reduce-scatter
        global_loss = global_loss.defined() ? global_loss + round_loss : round_loss;
      }
    }
    {
      auto scope = phases.scope(Phase::Optimizer);
      if (scaler_.enabled()) agree_on_overflow(units_->optimizer_parameters(), device_, *group_);
      scaler_.step(*optimizer_);
    }
    ++measured_steps_;
    return global_loss;
  }

  std::vector<torch::Tensor> do_trained_parameters() override { return sharded_->full_parameters(); }
  // Between steps the model's own parameters have no memory under them (freed units); the chunks
  // are the optimizer's parameters, which held_tensors() counts.
  std::vector<torch::Tensor> do_held_parameters() override { return model_->distinct_parameters(); }

  std::optional<CommSummary> do_comm_summary() const override {
    const auto& t = units_->traffic();
    if (t.steps == 0) return std::nullopt;
    // Per optimizer step: under --grad-accum (without --no-sync-accum) each micro-batch is a round of
    // the units' collectives, counted in t.steps.
    const std::int64_t optimizer_steps = std::max<std::int64_t>(1, measured_steps_);
    const auto steps = static_cast<double>(optimizer_steps);
    CommSummary c;
    c.backend = group_->backend_name();
    c.collective_seconds_measured = group_->host_waits_for_collectives();
    c.world_size = group_->size();
    c.buckets = static_cast<int>(units_->unit_count());
    c.bytes_per_step = t.allreduce_bytes / optimizer_steps;
    c.reduce_scatter_bytes_per_step = t.reduce_scatter_bytes / optimizer_steps;
    c.all_gather_bytes_per_step = t.all_gather_bytes / optimizer_steps;
    c.reduce_scatter_seconds_per_step = t.reduce_scatter_seconds / steps;
    c.all_gather_seconds_per_step = t.all_gather_seconds / steps;
    for (std::size_t u = 0; u < units_->unit_count(); ++u) c.units.push_back({units_->unit_bytes(u), units_->unit_is_root(u)});
    return c;
  }
  void do_reset_measured_stats() override {
    units_->reset_traffic();
    measured_steps_ = 0;
  }

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
  int grad_accum_ = 1;
  std::int64_t measured_steps_ = 0;  // optimizer steps since reset_measured_stats
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"fsdp", "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded; each wrap unit gathered for its forward and backward",
                            7, /*uses_all_devices=*/true, [] { return std::make_unique<FsdpStrategy>(); }, /*multi_process=*/true});

}  // namespace ddpbench
