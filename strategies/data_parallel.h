#pragma once
// What `dp` and `dp-loss-in-model` share: single-process DataParallel as PyTorch's
// nn.DataParallel does it, on N CUDA devices or N CPU virtual devices.
//
// Per step: replicate (the master's parameters and buffers are copied into the replicas on
// devices 1..N-1; the replica on device 0 is the master itself, sharing its storage, as in
// PyTorch), scatter the batch, run the replicas concurrently on per-device threads, then (the
// strategy's part) compute the loss and backward, reduce the replicas' gradients into the master,
// and one optimizer step on the master.
//
// Buffers follow PyTorch's DataParallel: they are broadcast from the master every step, so
// BatchNorm running statistics are updated only from device 0's chunk (the replica sharing the
// master's storage); the other replicas' updates are overwritten at the next step.
#include <memory>
#include <vector>

#include "devices/device_workers.h"
#include "strategies/strategy.h"

namespace ddpbench {

class DataParallelStrategy : public Strategy {
 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec& spec, const DeviceSet& devices,
                                                   const StrategyOptions& options) const override;
  void do_setup(const StrategySetup& setup) override;
  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) final;
  std::vector<torch::Tensor> do_trained_parameters() override { return master_->distinct_parameters(); }

  // Scatter, forward on every replica, loss, backward; returns the loss of `batch` (a step's, or one
  // micro-batch of it under --grad-accum) on device 0 times `weight`, which backward starts from
  // too. On return every replica's parameters hold its gradients, added to what they held.
  virtual torch::Tensor forward_backward(const Batch& batch, PhaseRecorder& phases, double weight) = 0;

  int replica_count() const { return static_cast<int>(replicas_.size()); }
  WorkloadModel& replica(int i) { return *replicas_[static_cast<size_t>(i)]; }
  const Workload& workload() const { return *workload_; }
  const DeviceSet& devices() const { return *devices_; }
  DeviceWorkers& workers() { return *workers_; }
  // --dtype: each replica's forward (and loss) runs in an AutocastScope of this precision on its
  // own thread; backward starts from scaler().scale(loss).
  Precision precision() const { return precision_; }
  const LossScaler& scaler() const { return scaler_; }

 private:
  void replicate();
  void reduce_gradients();

  const Workload* workload_ = nullptr;
  const DeviceSet* devices_ = nullptr;
  ModelPtr master_;
  std::vector<ModelPtr> replicas_;  // replicas_[0] is master_
  std::vector<std::vector<torch::Tensor>> replica_parameters_;
  std::vector<std::vector<torch::Tensor>> replica_buffers_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DeviceWorkers> workers_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
  int grad_accum_ = 1;
};

}  // namespace ddpbench
