// optim/sgd_cpu_kernel: the one-pass SGD step against torch::optim::SGD on every LibTorch (make_sgd
// takes it only where ATen has no fused SGD, so on 2.4+ only this file runs it), and what it refuses.
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include "optim/sgd_cpu_kernel.h"

namespace ddpbench {
namespace {

std::vector<torch::Tensor> kernel_test_parameters(c10::ScalarType dtype) {
  torch::manual_seed(21);
  std::vector<torch::Tensor> out;
  // 70,000 elements: more than one of the kernel's 32 Ki grains, so a parallel_for split is covered.
  for (auto shape : std::vector<std::vector<int64_t>>{{70, 1000}, {64}, {3, 5, 7}}) {
    out.push_back(torch::randn(shape, torch::TensorOptions().dtype(dtype)));
  }
  return out;
}

// Largest difference, relative to the parameter's largest entry, after `steps` steps of the kernel
// and of torch::optim::SGD on the same gradients.
double kernel_against_torch_optim(const torch::optim::SGDOptions& options, c10::ScalarType dtype, int steps) {
  auto ours = kernel_test_parameters(dtype), theirs = kernel_test_parameters(dtype);
  for (auto& p : theirs) p.requires_grad_(true);
  torch::optim::SGD reference(theirs, options);
  std::vector<torch::Tensor> buffers;
  for (const auto& p : ours) buffers.push_back(torch::empty_like(p));
  const SgdCpuOptions o{options.lr(), options.momentum(), options.dampening(), options.weight_decay(),
                        options.nesterov()};
  torch::manual_seed(22);
  for (int step = 0; step < steps; ++step) {
    std::vector<torch::Tensor> grads;
    for (size_t i = 0; i < ours.size(); ++i) {
      grads.push_back(torch::randn_like(ours[i]));
      theirs[i].mutable_grad() = grads.back().clone();
    }
    sgd_cpu_kernel_step(ours, grads, buffers, /*first_step=*/step == 0, o);
    reference.step();
  }
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    const auto expected = theirs[i].detach();
    worst = std::max(worst, (ours[i] - expected).abs().max().item<double>() / expected.abs().max().item<double>());
  }
  return worst;
}

TEST(SgdCpuKernel, MatchesTorchOptimSgdOverFiveSteps) {
  for (const auto& options : {torch::optim::SGDOptions(0.01).momentum(0.9),
                              torch::optim::SGDOptions(0.05).momentum(0.8).weight_decay(1e-2).nesterov(true),
                              torch::optim::SGDOptions(0.05).momentum(0.8).dampening(0.1).weight_decay(1e-3)}) {
    EXPECT_LT(kernel_against_torch_optim(options, torch::kFloat32, 5), 1e-6);
    EXPECT_LT(kernel_against_torch_optim(options, torch::kFloat64, 5), 1e-14);
  }
}

TEST(SgdCpuKernel, TakesOnlyContiguousCpuFloatTensorsOfOneDtype) {
  const auto p = torch::randn({4, 6}), g = torch::randn({4, 6}), b = torch::zeros({4, 6});
  EXPECT_TRUE(sgd_cpu_kernel_applies({p}, {g}, {b}));
  EXPECT_FALSE(sgd_cpu_kernel_applies({p.to(torch::kBFloat16)}, {g.to(torch::kBFloat16)}, {b.to(torch::kBFloat16)}));
  EXPECT_FALSE(sgd_cpu_kernel_applies({p}, {g.to(torch::kFloat64)}, {b}));  // a gradient of another dtype
  EXPECT_FALSE(sgd_cpu_kernel_applies({p}, {g.t().contiguous().t()}, {b}));  // a strided gradient
  EXPECT_FALSE(sgd_cpu_kernel_applies({p}, {g}, {}));
  EXPECT_THROW(sgd_cpu_kernel_step({p}, {g.to(torch::kFloat64)}, {b}, true, {}), std::logic_error);
}

}  // namespace
}  // namespace ddpbench
