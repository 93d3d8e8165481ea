#include "strategies/data_parallel.h"

#include "devices/counting_allocator.h"
#include "optim/optimizers.h"
#include "strategies/microbatches.h"

namespace ddpbench {

std::optional<std::string> DataParallelStrategy::do_unsupported_reason(const CaseSpec& spec,
                                                                       const DeviceSet& devices,
                                                                       const StrategyOptions&) const {
  if (spec.world_size > devices.size()) {
    return "needs " + std::to_string(spec.world_size) + " devices, " + std::to_string(devices.size()) + " present";
  }
  return std::nullopt;
}

void DataParallelStrategy::do_setup(const StrategySetup& setup) {
  workload_ = &setup.workload;
  devices_ = &setup.devices;
  master_ = setup.model;
  master_->to(devices_->device(0));
  master_->train();
  replicas_ = {master_};
  for (int i = 1; i < setup.spec.world_size; ++i) {
    CpuMemoryCounter::DeviceScope charge_to(i);
    auto replica = clone_model(*master_, devices_->device(i));
    replica->train();
    replicas_.push_back(replica);
  }
  for (const auto& r : replicas_) {
    replica_parameters_.push_back(r->distinct_parameters());
    replica_buffers_.push_back(r->distinct_buffers());
  }
  optimizer_ = setup.make_optimizer(master_->trainable_parameters());
  precision_ = setup.precision;
  scaler_ = LossScaler(precision_);
  workers_ = std::make_unique<DeviceWorkers>(*devices_, setup.spec.world_size);
  grad_accum_ = setup.options.levers.grad_accum;
}

void DataParallelStrategy::replicate() {
  torch::NoGradGuard no_grad;
  const auto& master_params = replica_parameters_[0];
  const auto& master_buffers = replica_buffers_[0];
  for (size_t r = 1; r < replicas_.size(); ++r) {
    for (size_t k = 0; k < master_params.size(); ++k) replica_parameters_[r][k].copy_(master_params[k], true);
    for (size_t k = 0; k < master_buffers.size(); ++k) replica_buffers_[r][k].copy_(master_buffers[k], true);
  }
}

void DataParallelStrategy::reduce_gradients() {
  torch::NoGradGuard no_grad;
  auto& master_params = replica_parameters_[0];
  const auto device0 = devices_->device(0);
  for (size_t k = 0; k < master_params.size(); ++k) {
    auto& sum = master_params[k].mutable_grad();
    for (size_t r = 1; r < replicas_.size(); ++r) {
      auto& grad = replica_parameters_[r][k].mutable_grad();
      if (!grad.defined()) continue;
      const auto on_device0 = devices_->is_cuda() ? grad.to(device0, /*non_blocking=*/true) : grad;
      if (sum.defined()) {
        sum.add_(on_device0);
      } else {
        sum = on_device0.clone();
      }
      // Replicas are rebuilt every step in PyTorch, so their gradients start empty each time.
      grad = torch::Tensor();
    }
  }
}

torch::Tensor DataParallelStrategy::do_step(const Batch& batch, PhaseRecorder& phases) {
  {  // the master's gradients, from the last step: zero_grad, optimizer work (strategy.h)
    auto zero_grad = phases.scope(Phase::Optimizer);
    set_gradients_to_none(*optimizer_);
  }
  {
    auto scope = phases.scope(Phase::Replicate);
    replicate();
  }
  // --grad-accum: each micro-batch scattered and run in turn, every replica's gradients summing in
  // place; one reduce into the master after the last, as nn.DataParallel under accumulation does.
  torch::Tensor loss;
  for (const auto& mb : split_microbatches(batch, grad_accum_)) {
    const auto part = forward_backward(mb.batch, phases, mb.weight);
    loss = loss.defined() ? loss + part.detach() : part.detach();
  }
  {
    auto scope = phases.scope(Phase::Reduce);
    reduce_gradients();
  }
  {
    auto scope = phases.scope(Phase::Optimizer);
    scaler_.step(*optimizer_);  // the master's gradients: the replicas' sum
  }
  return loss.detach();
}

}  // namespace ddpbench
