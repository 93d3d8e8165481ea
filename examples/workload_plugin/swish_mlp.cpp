// An example workload plug-in: `ddpbench --workload-lib libddpbench_example_plugin.so --workload swish-mlp`.
//
// A plug-in is for a model TorchScript cannot carry: here an activation with a hand-written
// backward (a torch::autograd::Function), which torch.jit.script cannot export from Python. It is
// built against ddpbench's headers and LibTorch, and linked against neither ddpbench's code nor its
// registry: the ddpbench executable exports those symbols, and dlopen() binds them, so the
// DDPBENCH_REGISTER_WORKLOAD line below adds the workload to the executable's own registry. The
// same library is loaded by every rank and hogwild worker process of a run.
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>

#include "compat/torch_compat.h"
#include "workloads/workload.h"

namespace swish_example {

constexpr std::int64_t kInputs = 32;
constexpr std::int64_t kHidden = 64;
constexpr std::int64_t kClasses = 8;

// swish(x) = x * sigmoid(x), with its derivative written out: sigmoid(x) * (1 + x * (1 - sigmoid(x))).
struct Swish : torch::autograd::Function<Swish> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return x * torch::sigmoid(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto x = ctx->get_saved_variables()[0];
    const auto s = torch::sigmoid(x);
    return {grad[0] * s * (1 + x * (1 - s))};
  }
};

class SwishMlp final : public ddpbench::DefaultConstructedModel<SwishMlp> {
 public:
  SwishMlp() {
    fc1 = register_module("fc1", torch::nn::Linear(kInputs, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kHidden));
    fc3 = register_module("fc3", torch::nn::Linear(kHidden, kClasses));
  }
  // Written as a chain (see chain_length below), so that `pp` can cut it between its units.
  torch::Tensor forward(const torch::Tensor& x) override { return forward_range(x, 0, 2); }
  // fsdp's wrap units, as a built-in workload names them: the first layer and the residual block;
  // fc3, in none, is the root's (gathered for the whole step).
  std::vector<ddpbench::WrapUnit> wrap_units() override { return {{"fc1", fc1->parameters()}, {"block", fc2->parameters()}}; }
  // The model as a chain, what a pipeline needs: unit 0, unit 1, then fc3 after them (the tail, on
  // the last stage). forward_range runs each unit between fsdp's hooks (call_unit).
  std::size_t chain_length() const override { return 2; }
  std::vector<torch::Tensor> chain_tail_parameters() override { return fc3->parameters(); }

 protected:
  torch::Tensor chain_unit(std::size_t unit, const torch::Tensor& h) override {
    if (unit == 0) return Swish::apply(fc1->forward(h));
    return h + Swish::apply(fc2->forward(h));  // a residual block
  }
  torch::Tensor chain_tail(const torch::Tensor& h) override { return fc3->forward(h); }

 private:
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

class SwishMlpWorkload final : public ddpbench::Workload {
 public:
  std::string name() const override { return "swish-mlp"; }
  std::string description() const override {
    return "plug-in example: residual MLP 32-64-64-8 with a hand-written swish backward, SGD (batch 32)";
  }
  std::int64_t default_global_batch() const override { return 32; }
  ddpbench::ModelPtr make_model() const override { return std::make_shared<SwishMlp>(); }
  ddpbench::Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    auto gen = ddpbench::compat::make_cpu_generator(seed);
    return {torch::randn({size, kInputs}, gen), torch::randint(0, kClasses, {size}, gen, torch::kInt64)};
  }
  double flops_per_sample() const override {
    return 3.0 * 2.0 * (kInputs * kHidden + kHidden * kHidden + kHidden * kClasses);
  }
};

}  // namespace swish_example

namespace ddpbench {
using swish_example::SwishMlpWorkload;
DDPBENCH_REGISTER_WORKLOAD(SwishMlpWorkload);
}  // namespace ddpbench
