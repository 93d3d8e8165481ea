// `mlp`, the reference workload; its definition is fixed by WORKLOADS.md so results compare across tools.
#include <torch/nn/modules/linear.h>

#include "compat/torch_compat.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

constexpr std::int64_t kInputs = 784;
constexpr std::int64_t kHidden = 1024;
constexpr std::int64_t kClasses = 10;

class MlpModel final : public DefaultConstructedModel<MlpModel> {
 public:
  MlpModel() {
    fc1 = register_module("fc1", torch::nn::Linear(kInputs, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kHidden));
    fc3 = register_module("fc3", torch::nn::Linear(kHidden, kHidden));
    fc4 = register_module("fc4", torch::nn::Linear(kHidden, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return forward_range(x, 0, 4); }
  // A chain of its four layers, nothing before or after them.
  std::size_t chain_length() const override { return 4; }
  // Each layer a unit.
  std::vector<WrapUnit> wrap_units() override {
    return {{"fc1", fc1->parameters()}, {"fc2", fc2->parameters()}, {"fc3", fc3->parameters()}, {"fc4", fc4->parameters()}};
  }
  // Columns, rows, columns, rows: fc1's share of the hidden features goes through ReLU to fc2, whose
  // partial sums one all-reduce completes; fc3 and fc4 the same.
  std::vector<TensorParallelLayer> tensor_parallel_plan() override {
    using S = TensorParallelSplit;
    return {planned_linear("fc1", *fc1, S::Column), planned_linear("fc2", *fc2, S::Row),
            planned_linear("fc3", *fc3, S::Column), planned_linear("fc4", *fc4, S::Row)};
  }

 protected:
  torch::Tensor chain_unit(std::size_t unit, const torch::Tensor& h) override {
    switch (unit) {
      case 0: return torch::relu(call_linear(*fc1, h));
      case 1: return torch::relu(call_linear(*fc2, h));
      case 2: return torch::relu(call_linear(*fc3, h));
      default: return call_linear(*fc4, h);
    }
  }

 private:
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, fc4{nullptr};
};

class MlpWorkload final : public Workload {
 public:
  std::string name() const override { return "mlp"; }
  std::string description() const override {
    return "reference MLP 784-1024-1024-1024-10, cross-entropy, SGD lr 0.01 momentum 0.9 (batch 128)";
  }
  std::int64_t default_global_batch() const override { return 128; }
  ModelPtr make_model() const override { return std::make_shared<MlpModel>(); }
  Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    auto gen = compat::make_cpu_generator(seed);
    auto inputs = torch::randn({size, kInputs}, gen, torch::kFloat32);
    auto targets = torch::randint(0, kClasses, {size}, gen, torch::kInt64);
    return {inputs, targets};
  }
  double flops_per_sample() const override {
    const double macs = kInputs * kHidden + 2.0 * kHidden * kHidden + kHidden * kClasses;
    return 3.0 * 2.0 * macs;  // backward costs about twice the forward
  }
};

}  // namespace
DDPBENCH_REGISTER_WORKLOAD(MlpWorkload);
}  // namespace ddpbench
