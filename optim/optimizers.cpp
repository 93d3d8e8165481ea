#include "optim/optimizers.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "compat/torch_compat.h"
#include "optim/sgd_cpu_kernel.h"

namespace ddpbench {
namespace {

// The parameters that have a gradient this step, with their indices into the optimizer's state.
struct StepLists {
  std::vector<size_t> index;
  std::vector<torch::Tensor> params, grads;
};

StepLists with_gradients(const std::vector<torch::Tensor>& params) {
  StepLists out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    out.index.push_back(i);
    out.params.push_back(params[i]);
    out.grads.push_back(params[i].grad());
  }
  return out;
}

template <typename T>
std::vector<T> pick(const std::vector<T>& all, const std::vector<size_t>& index) {
  std::vector<T> out;
  out.reserve(index.size());
  for (size_t i : index) out.push_back(all[i]);
  return out;
}

// The device type of one step's parameters, all on one device (a replica's, a rank's, a worker's).
c10::DeviceType device_type_of(const std::vector<torch::Tensor>& params) {
  return params.empty() ? c10::DeviceType::CPU : params.front().device().type();
}

// What both optimizers share: the closure, no autograd while updating, one parameter group, and the
// lists of the parameters that have a gradient this step (those without one are left alone).
class MultiTensorOptimizer : public torch::optim::Optimizer {
 public:
  using Optimizer::Optimizer;

  // The state tensors it holds now (none before its first step).
  virtual std::vector<torch::Tensor> state_tensors() const = 0;

  torch::Tensor step(LossClosure closure = nullptr) final {
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enable(true);
      loss = closure();
    }
    const auto& all = param_groups().front().params();
    const StepLists lists = with_gradients(all);
    if (!lists.params.empty()) update(all, lists);
    return loss;
  }

 protected:
  virtual void update(const std::vector<torch::Tensor>& all, const StepLists& lists) = 0;
};

class MultiTensorAdamW final : public MultiTensorOptimizer {
 public:
  MultiTensorAdamW(std::vector<torch::Tensor> params, const torch::optim::AdamWOptions& options)
      : MultiTensorOptimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                             std::make_unique<torch::optim::AdamWOptions>(options)),
        options_(options) {
    if (options.amsgrad()) throw std::invalid_argument("make_adamw: amsgrad is not supported");
  }

  void update(const std::vector<torch::Tensor>& all, const StepLists& lists) override {
    if (exp_avgs_.empty()) {
      for (const auto& p : all) {
        exp_avgs_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        exp_avg_sqs_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        steps_.push_back(torch::zeros({}, p.options().dtype(torch::kFloat)));  // the fused kernel reads a float step
        step_counts_.push_back(0);
      }
    }
    const auto& o = options_;
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    auto exp_avgs = pick(exp_avgs_, lists.index), exp_avg_sqs = pick(exp_avg_sqs_, lists.index);
    for (size_t i : lists.index) ++step_counts_[i];
    if (compat::has_fused_optimizers(device_type_of(lists.params))) {
      auto steps = pick(steps_, lists.index);
      for (auto& s : steps) s.add_(1);  // the fused kernel does not advance the step itself
      compat::fused_adamw_step(lists.params, lists.grads, exp_avgs, exp_avg_sqs, steps,
                               {o.lr(), beta1, beta2, o.weight_decay(), o.eps()});
      return;
    }
    // Parameters that skipped a step (no gradient) have another bias correction: one group per count.
    std::vector<std::int64_t> counts;
    for (size_t i : lists.index) {
      if (std::find(counts.begin(), counts.end(), step_counts_[i]) == counts.end()) counts.push_back(step_counts_[i]);
    }
    for (std::int64_t count : counts) {
      std::vector<size_t> group;  // positions within `lists`
      for (size_t k = 0; k < lists.index.size(); ++k) {
        if (step_counts_[lists.index[k]] == count) group.push_back(k);
      }
      auto params = pick(lists.params, group), grads = pick(lists.grads, group);
      auto m = pick(exp_avgs, group), v = pick(exp_avg_sqs, group);
      const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(count));
      const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(count));
      // As torch::optim::AdamW: decoupled decay, then the moments, then the step.
      if (o.weight_decay() != 0) at::_foreach_mul_(params, 1 - o.lr() * o.weight_decay());
      at::_foreach_mul_(m, beta1);
      at::_foreach_add_(m, grads, 1 - beta1);
      at::_foreach_mul_(v, beta2);
      at::_foreach_addcmul_(v, grads, grads, 1 - beta2);
      auto denom = at::_foreach_sqrt(v);
      at::_foreach_div_(denom, std::sqrt(bias_correction2));
      at::_foreach_add_(denom, o.eps());
      at::_foreach_addcdiv_(params, m, denom, -o.lr() / bias_correction1);
    }
  }

 private:
  std::vector<torch::Tensor> state_tensors() const override {
    std::vector<torch::Tensor> out = exp_avgs_;
    out.insert(out.end(), exp_avg_sqs_.begin(), exp_avg_sqs_.end());
    out.insert(out.end(), steps_.begin(), steps_.end());
    return out;
  }

  torch::optim::AdamWOptions options_;
  std::vector<torch::Tensor> exp_avgs_, exp_avg_sqs_, steps_;
  std::vector<std::int64_t> step_counts_;
};

class MultiTensorSgd final : public MultiTensorOptimizer {
 public:
  MultiTensorSgd(std::vector<torch::Tensor> params, const torch::optim::SGDOptions& options)
      : MultiTensorOptimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                             std::make_unique<torch::optim::SGDOptions>(options)),
        options_(options) {
    if (options.momentum() <= 0) throw std::invalid_argument("make_sgd: momentum must be positive");
  }

  void update(const std::vector<torch::Tensor>& all, const StepLists& lists) override {
    if (buffers_.empty()) buffers_.resize(all.size());
    const auto& o = options_;
    // A parameter's first step starts its buffer from its gradient; the others continue theirs.
    std::vector<size_t> first, later;
    for (size_t k = 0; k < lists.index.size(); ++k) (buffers_[lists.index[k]].defined() ? later : first).push_back(k);
    const bool fused = compat::has_fused_optimizers(device_type_of(lists.params));
    for (const auto* group : {&first, &later}) {
      if (group->empty()) continue;
      const bool first_step = group == &first;
      auto params = pick(lists.params, *group), grads = pick(lists.grads, *group);
      if (first_step) {
        for (size_t k : *group) buffers_[lists.index[k]] = torch::empty_like(lists.params[k], torch::MemoryFormat::Preserve);
      }
      std::vector<torch::Tensor> buffers;
      for (size_t k : *group) buffers.push_back(buffers_[lists.index[k]]);
      if (fused) {
        compat::fused_sgd_step(params, grads, buffers, first_step,
                               {o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()});
        continue;
      }
      if (sgd_cpu_kernel_applies(params, grads, buffers)) {  // one pass instead of three, where ATen has no fused SGD
        sgd_cpu_kernel_step(params, grads, buffers, first_step,
                            {o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()});
        continue;
      }
      // As torch::optim::SGD: d = g + wd p; buf = d (first step) or momentum buf + (1 - dampening) d;
      // d = d + momentum buf (nesterov) or buf; p -= lr d.
      std::vector<torch::Tensor> d = grads;
      if (o.weight_decay() != 0) d = at::_foreach_add(grads, params, o.weight_decay());
      if (first_step) {
        for (size_t j = 0; j < buffers.size(); ++j) buffers[j].copy_(d[j]);
      } else {
        at::_foreach_mul_(buffers, o.momentum());
        at::_foreach_add_(buffers, d, 1 - o.dampening());
      }
      if (o.nesterov()) {
        d = at::_foreach_add(d, buffers, o.momentum());
      } else {
        d = buffers;
      }
      at::_foreach_add_(params, d, -o.lr());
    }
  }

 private:
  std::vector<torch::Tensor> state_tensors() const override {
    std::vector<torch::Tensor> out;
    for (const auto& b : buffers_)
      if (b.defined()) out.push_back(b);
    return out;
  }

  torch::optim::SGDOptions options_;
  std::vector<torch::Tensor> buffers_;
};

}  // namespace

std::string optimizer_implementation(const std::string& optimizer, c10::DeviceType device_type) {
  if (compat::has_fused_optimizers(device_type)) return "fused";
  if (optimizer == "sgd" && device_type == c10::DeviceType::CPU) return "one-pass CPU kernel";
  return "foreach";
}

void set_gradients_to_none(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
}

std::optional<std::vector<torch::Tensor>> optimizer_state_tensors(const torch::optim::Optimizer& optimizer) {
  if (const auto* ours = dynamic_cast<const MultiTensorOptimizer*>(&optimizer)) return ours->state_tensors();
  // LibTorch's own (a plug-in's workload may build them): their per-parameter state objects.
  std::vector<torch::Tensor> out;
  auto add = [&out](const torch::Tensor& t) {
    if (t.defined()) out.push_back(t);
  };
  for (const auto& entry : optimizer.state()) {
    const auto* state = entry.second.get();
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
      add(sgd->momentum_buffer());
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
      add(adamw->exp_avg());
      add(adamw->exp_avg_sq());
      add(adamw->max_exp_avg_sq());
    } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
      add(adam->exp_avg());
      add(adam->exp_avg_sq());
      add(adam->max_exp_avg_sq());
    } else {
      return std::nullopt;  // a state this build cannot read
    }
  }
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(std::vector<torch::Tensor> parameters,
                                                   const torch::optim::AdamWOptions& options) {
  return std::make_unique<MultiTensorAdamW>(std::move(parameters), options);
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<torch::Tensor> parameters,
                                                 const torch::optim::SGDOptions& options) {
  return std::make_unique<MultiTensorSgd>(std::move(parameters), options);
}

}  // namespace ddpbench
