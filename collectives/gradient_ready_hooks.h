#pragma once
// A callback the moment each parameter's gradient for this backward is final: a post-hook on the
// parameter's AccumulateGrad node, where PyTorch's DDP Reducer and FSDP2 react too (LibTorch's C++
// API has no register_post_accumulate_grad_hook). Hooks may fire on several autograd threads.
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace ddpbench {

class GradientReadyHooks {
 public:
  // `on_ready(k)` runs after parameters[k]'s gradient has been accumulated into its .grad.
  GradientReadyHooks(const std::vector<torch::Tensor>& parameters, std::function<void(std::size_t)> on_ready);
  // Removes the hooks: the model may outlive their owner.
  ~GradientReadyHooks();
  GradientReadyHooks(const GradientReadyHooks&) = delete;
  GradientReadyHooks& operator=(const GradientReadyHooks&) = delete;

 private:
  class Hook;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

}  // namespace ddpbench
