// optim/: the fused or multi-tensor AdamW and SGD against LibTorch's per-parameter torch::optim,
// step for step, on the same parameters and gradients.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <functional>

#include "optim/optimizers.h"

namespace ddpbench {
namespace {

using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

std::vector<torch::Tensor> parameters_like_a_model(c10::ScalarType dtype) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> out;
  for (auto shape : std::vector<std::vector<int64_t>>{{64, 32}, {64}, {10, 64}, {10}, {3, 5, 7}}) {
    out.push_back(torch::randn(shape, torch::TensorOptions().dtype(dtype)).requires_grad_(true));
  }
  return out;
}

// Runs both optimizers over `steps` steps of the same random gradients (parameter `skip` gets none
// in step 2) and returns the largest difference of any parameter relative to its largest entry.
double largest_difference(const Factory& ours, const Factory& reference, int steps, c10::ScalarType dtype,
                          int skip = -1) {
  auto a = parameters_like_a_model(dtype), b = parameters_like_a_model(dtype);
  auto opt_a = ours(a), opt_b = reference(b);
  torch::manual_seed(12);
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (static_cast<int>(i) == skip && step == 2) {
        a[i].mutable_grad() = torch::Tensor();
        b[i].mutable_grad() = torch::Tensor();
        continue;
      }
      const auto g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    opt_a->step();
    opt_b->step();
  }
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = b[i].abs().max().item<double>();
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST(Optimizers, SayWhichImplementationTheyUse) {
  const std::string adamw = optimizer_implementation("adamw", c10::DeviceType::CPU);
  const std::string sgd = optimizer_implementation("sgd", c10::DeviceType::CPU);
  EXPECT_TRUE(adamw == "fused" || adamw == "foreach") << adamw;
  // On the CPU SGD never makes three passes: ATen's fused kernel, or ours where there is none.
  EXPECT_TRUE(sgd == (adamw == "fused" ? "fused" : "one-pass CPU kernel")) << sgd;
  RecordProperty("cpu_implementation", adamw + ", sgd " + sgd);
}

TEST(Optimizers, AdamWMatchesTorchOptimOverFiveSteps) {
  const auto options = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.1);
  const Factory ours = [&](std::vector<torch::Tensor> p) { return make_adamw(std::move(p), options); };
  const Factory reference = [&](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(std::move(p), options);
  };
  // The parameters move by about lr a step; fp32 rounding of the same arithmetic in another order
  // stays within a few ulps of them.
  EXPECT_LT(largest_difference(ours, reference, 5, torch::kFloat32), 1e-6);
  EXPECT_LT(largest_difference(ours, reference, 5, torch::kFloat64), 1e-14);
}

TEST(Optimizers, AdamWKeepsEachParametersOwnStepCount) {
  // A parameter without a gradient in a step keeps its step count, and its bias correction then
  // differs from the others' (torch::optim::AdamW counts per parameter too).
  const auto options = torch::optim::AdamWOptions(1e-2);
  const Factory ours = [&](std::vector<torch::Tensor> p) { return make_adamw(std::move(p), options); };
  const Factory reference = [&](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(std::move(p), options);
  };
  EXPECT_LT(largest_difference(ours, reference, 5, torch::kFloat64, /*skip=*/1), 1e-14);
}

TEST(Optimizers, SgdWithMomentumMatchesTorchOptimOverFiveSteps) {
  for (const auto& options : {torch::optim::SGDOptions(0.01).momentum(0.9),
                              torch::optim::SGDOptions(0.05).momentum(0.8).weight_decay(1e-2).nesterov(true),
                              torch::optim::SGDOptions(0.05).momentum(0.8).dampening(0.1)}) {
    const Factory ours = [&](std::vector<torch::Tensor> p) { return make_sgd(std::move(p), options); };
    const Factory reference = [&](std::vector<torch::Tensor> p) {
      return std::make_unique<torch::optim::SGD>(std::move(p), options);
    };
    EXPECT_LT(largest_difference(ours, reference, 5, torch::kFloat32), 1e-6);
    EXPECT_LT(largest_difference(ours, reference, 5, torch::kFloat64, /*skip=*/3), 1e-14);
  }
}

TEST(Optimizers, RefuseWhatTheyDoNotImplement) {
  auto p = parameters_like_a_model(torch::kFloat32);
  EXPECT_THROW(make_adamw(p, torch::optim::AdamWOptions(1e-3).amsgrad(true)), std::invalid_argument);
  EXPECT_THROW(make_sgd(p, torch::optim::SGDOptions(0.1)), std::invalid_argument);
}

}  // namespace
}  // namespace ddpbench
