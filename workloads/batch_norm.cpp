#include "workloads/batch_norm.h"

#include <torch/nn/functional/batchnorm.h>

namespace ddpbench {

SyncableBatchNorm2dImpl::SyncableBatchNorm2dImpl(std::int64_t features, double eps, double momentum)
    : features_(features), eps_(eps), momentum_(momentum) {
  reset();
}

void SyncableBatchNorm2dImpl::reset() {
  weight = register_parameter("weight", torch::ones({features_}));
  bias = register_parameter("bias", torch::zeros({features_}));
  running_mean = register_buffer("running_mean", torch::zeros({features_}));
  running_var = register_buffer("running_var", torch::ones({features_}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

torch::Tensor SyncableBatchNorm2dImpl::forward(const torch::Tensor& input) {
  if (is_training() && sum_) return forward_synchronized(input);
  if (is_training()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return torch::batch_norm(input, weight, bias, running_mean, running_var, is_training(), momentum_, eps_,
                           /*cudnn_enabled=*/true);
}

torch::Tensor SyncableBatchNorm2dImpl::forward_synchronized(const torch::Tensor& x) {
  const std::vector<std::int64_t> reduce_dims{0, 2, 3};
  const auto local_count = torch::full({1}, static_cast<double>(x.numel() / features_), x.options());
  // One collective per layer: [sum | sum of squares | count].
  const auto totals = sum_(torch::cat({x.sum(reduce_dims), (x * x).sum(reduce_dims), local_count}));
  const auto count = totals.narrow(0, 2 * features_, 1);
  const auto mean = totals.narrow(0, 0, features_) / count;
  const auto var = totals.narrow(0, features_, features_) / count - mean * mean;  // biased, as BN normalises
  {
    torch::NoGradGuard no_grad;
    const double n = count.item<double>();
    running_mean.mul_(1 - momentum_).add_(mean.detach() * momentum_);
    running_var.mul_(1 - momentum_).add_(var.detach() * (momentum_ * n / std::max(1.0, n - 1)));
    num_batches_tracked.add_(1);
  }
  const auto shape = std::vector<std::int64_t>{1, features_, 1, 1};
  const auto scale = weight * torch::rsqrt(var + eps_);
  return x * scale.view(shape) + (bias - mean * scale).view(shape);
}

int convert_to_sync_batch_norm(torch::nn::Module& module, const CrossReplicaSum& sum) {
  int converted = 0;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    if (auto bn = std::dynamic_pointer_cast<SyncableBatchNorm2dImpl>(child)) {
      bn->set_cross_replica_sum(sum);
      ++converted;
    }
  }
  return converted;
}

}  // namespace ddpbench
