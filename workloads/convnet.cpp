// `convnet`: a small CIFAR-shaped network with BatchNorm, where SyncBatchNorm matters.
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "compat/torch_compat.h"
#include "workloads/batch_norm.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

constexpr std::int64_t kChannels = 3;
constexpr std::int64_t kSide = 32;
constexpr std::int64_t kConvNetClasses = 10;
constexpr std::int64_t kWidths[3] = {32, 64, 128};
constexpr std::int64_t kStrides[3] = {1, 2, 2};

class ConvNetModel final : public DefaultConstructedModel<ConvNetModel> {
 public:
  ConvNetModel() {
    std::int64_t in = kChannels;
    for (int i = 0; i < 3; ++i) {
      // No conv bias: the BatchNorm that follows has its own shift.
      convs[i] = register_module("conv" + std::to_string(i + 1),
                                 torch::nn::Conv2d(torch::nn::Conv2dOptions(in, kWidths[i], 3)
                                                       .stride(kStrides[i])
                                                       .padding(1)
                                                       .bias(false)));
      norms[i] = register_module("bn" + std::to_string(i + 1), SyncableBatchNorm2d(kWidths[i]));
      in = kWidths[i];
    }
    head = register_module("fc", torch::nn::Linear(kWidths[2], kConvNetClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return forward_range(x, 0, 3); }
  // A chain of its three stages; the pooling and the head come after them.
  std::size_t chain_length() const override { return 3; }
  std::vector<torch::Tensor> chain_tail_parameters() override { return head->parameters(); }
  // Each stage (a convolution and its BatchNorm) a unit; the head is the root's.
  std::vector<WrapUnit> wrap_units() override {
    std::vector<WrapUnit> units;
    for (int i = 0; i < 3; ++i) {
      auto parameters = convs[i]->parameters();
      for (const auto& p : norms[i]->parameters()) parameters.push_back(p);
      units.push_back({"stage" + std::to_string(i + 1), parameters});
    }
    return units;
  }

 protected:
  torch::Tensor chain_unit(std::size_t i, const torch::Tensor& h) override {
    return torch::relu(norms[i]->forward(convs[i]->forward(h)));
  }
  torch::Tensor chain_tail(const torch::Tensor& h) override {
    return head->forward(torch::nn::functional::adaptive_avg_pool2d(
                             h, torch::nn::functional::AdaptiveAvgPool2dFuncOptions(1))
                             .flatten(1));
  }

 private:
  torch::nn::Conv2d convs[3] = {nullptr, nullptr, nullptr};
  SyncableBatchNorm2d norms[3] = {nullptr, nullptr, nullptr};
  torch::nn::Linear head{nullptr};
};

class ConvNetWorkload final : public Workload {
 public:
  std::string name() const override { return "convnet"; }
  std::string description() const override {
    return "CIFAR-shaped conv-BatchNorm-ReLU x3 (32/64/128), avg-pool, linear; SGD (batch 64)";
  }
  std::int64_t default_global_batch() const override { return 64; }
  ModelPtr make_model() const override { return std::make_shared<ConvNetModel>(); }
  bool has_batch_norm() const override { return true; }
  Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    // Noise plus a per-class template, so there is something to learn beyond memorising samples.
    auto gen = compat::make_cpu_generator(seed);
    auto templates = torch::randn({kConvNetClasses, kChannels, kSide, kSide}, gen, torch::kFloat32);
    auto targets = torch::randint(0, kConvNetClasses, {size}, gen, torch::kInt64);
    auto inputs = torch::randn({size, kChannels, kSide, kSide}, gen, torch::kFloat32);
    inputs.add_(templates.index_select(0, targets), 0.5);
    return {inputs, targets};
  }
  double flops_per_sample() const override {
    double macs = 0;
    std::int64_t side = kSide, in = kChannels;
    for (int i = 0; i < 3; ++i) {
      side /= kStrides[i];
      macs += static_cast<double>(side * side) * kWidths[i] * in * 9;
      in = kWidths[i];
    }
    macs += static_cast<double>(kWidths[2]) * kConvNetClasses;
    return 3.0 * 2.0 * macs;
  }
};

}  // namespace
DDPBENCH_REGISTER_WORKLOAD(ConvNetWorkload);
}  // namespace ddpbench
