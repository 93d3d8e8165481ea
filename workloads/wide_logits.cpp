// `wide-logits`: a classifier with a large output layer, where gathering outputs on device 0 costs
// batch x 32768 x 4 bytes there: the DataParallel pile-up made visible.
#include <torch/nn/modules/linear.h>

#include "compat/torch_compat.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

constexpr std::int64_t kWideInputs = 256;
constexpr std::int64_t kWideHidden = 512;
constexpr std::int64_t kWideClasses = 32768;

class WideLogitsModel final : public DefaultConstructedModel<WideLogitsModel> {
 public:
  WideLogitsModel() {
    fc1 = register_module("fc1", torch::nn::Linear(kWideInputs, kWideHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kWideHidden, kWideClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return forward_range(x, 0, 2); }
  std::size_t chain_length() const override { return 2; }
  // Each layer a unit: fc2, the wide one, is most of the model.
  std::vector<WrapUnit> wrap_units() override { return {{"fc1", fc1->parameters()}, {"fc2", fc2->parameters()}}; }

 protected:
  torch::Tensor chain_unit(std::size_t unit, const torch::Tensor& h) override {
    return unit == 0 ? torch::relu(fc1->forward(h)) : fc2->forward(h);
  }

 private:
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

class WideLogitsWorkload final : public Workload {
 public:
  std::string name() const override { return "wide-logits"; }
  std::string description() const override {
    return "Linear 256-512, ReLU, Linear 512-32768: a wide output layer like an LM head; SGD (batch 256)";
  }
  std::int64_t default_global_batch() const override { return 256; }
  ModelPtr make_model() const override { return std::make_shared<WideLogitsModel>(); }
  Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    auto gen = compat::make_cpu_generator(seed);
    auto inputs = torch::randn({size, kWideInputs}, gen, torch::kFloat32);
    auto targets = torch::randint(0, kWideClasses, {size}, gen, torch::kInt64);
    return {inputs, targets};
  }
  double flops_per_sample() const override {
    return 3.0 * 2.0 * (static_cast<double>(kWideInputs) * kWideHidden + static_cast<double>(kWideHidden) * kWideClasses);
  }
};

}  // namespace
DDPBENCH_REGISTER_WORKLOAD(WideLogitsWorkload);
}  // namespace ddpbench
