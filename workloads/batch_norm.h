#pragma once
// BatchNorm2d that can be turned into a SyncBatchNorm: with a cross-replica sum installed, training
// statistics (sum, sum of squares, count) are summed over every rank before normalising, and the
// gradients flow back through the same sum, so N ranks normalise exactly as one device would over
// the global batch. Without one it is torch's fused batch_norm. Its parameters and buffers carry
// torch::nn::BatchNorm2d's names, so checkpoints load into either.
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <functional>
#include <memory>

namespace ddpbench {

// Sums a tensor over every replica, differentiably: the gradient of a sum is the sum of gradients.
using CrossReplicaSum = std::function<torch::Tensor(const torch::Tensor&)>;

class SyncableBatchNorm2dImpl : public torch::nn::Cloneable<SyncableBatchNorm2dImpl> {
 public:
  explicit SyncableBatchNorm2dImpl(std::int64_t features, double eps = 1e-5, double momentum = 0.1);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);
  void set_cross_replica_sum(CrossReplicaSum sum) { sum_ = std::move(sum); }
  bool synchronized() const { return static_cast<bool>(sum_); }

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  torch::Tensor forward_synchronized(const torch::Tensor& input);

  std::int64_t features_;
  double eps_;
  double momentum_;
  CrossReplicaSum sum_;
};
TORCH_MODULE(SyncableBatchNorm2d);

// Installs `sum` in every SyncableBatchNorm2d of `module`; returns how many there were.
int convert_to_sync_batch_norm(torch::nn::Module& module, const CrossReplicaSum& sum);

}  // namespace ddpbench
