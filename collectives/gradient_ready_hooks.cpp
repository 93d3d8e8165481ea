#include "collectives/gradient_ready_hooks.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <stdexcept>

namespace ddpbench {

class GradientReadyHooks::Hook final : public torch::autograd::FunctionPostHook {
 public:
  Hook(std::shared_ptr<const std::function<void(std::size_t)>> on_ready, std::size_t param)
      : on_ready_(std::move(on_ready)), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    (*on_ready_)(param_);
    return outputs;
  }

 private:
  std::shared_ptr<const std::function<void(std::size_t)>> on_ready_;
  std::size_t param_;
};

GradientReadyHooks::GradientReadyHooks(const std::vector<torch::Tensor>& parameters,
                                       std::function<void(std::size_t)> on_ready) {
  auto callback = std::make_shared<const std::function<void(std::size_t)>>(std::move(on_ready));
  for (std::size_t k = 0; k < parameters.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[k]);
    if (!accumulator) throw std::invalid_argument("GradientReadyHooks: parameter " + std::to_string(k) + " needs no gradient");
    accumulator->add_post_hook(std::make_unique<Hook>(callback, k));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientReadyHooks::~GradientReadyHooks() {
  for (auto& accumulator : accumulators_) {
    auto& hooks = accumulator->post_hooks();
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                               [](const auto& h) { return dynamic_cast<Hook*>(h.get()) != nullptr; }),
                hooks.end());
  }
}

}  // namespace ddpbench
