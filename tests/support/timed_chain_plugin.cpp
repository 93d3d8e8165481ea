// A workload whose chain units take known, equal times: `timed-chain`, four units, each a tiny
// Linear(8, 8) whose forward sleeps DDPBENCH_TIMED_UNIT_MS (default 4) milliseconds and whose
// backward sleeps twice that. Sleeping, not computing, so the times hold however many ranks share
// the host's cores: what the pipeline bubble's formula assumes (equal stages), for test_pp.cpp to
// hold the measured bubble against it. Loaded by --workload-lib as the example plug-in is, and it
// declares its chain through the workload interface as a plug-in does.
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "compat/torch_compat.h"
#include "workloads/workload.h"

namespace timed_chain {

constexpr std::int64_t kWidth = 8;
constexpr std::size_t kUnits = 4;

double unit_milliseconds() {
  const char* text = std::getenv("DDPBENCH_TIMED_UNIT_MS");
  return text != nullptr ? std::atof(text) : 4.0;
}

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }

// The identity, taking a known time each way.
struct Sleep : torch::autograd::Function<Sleep> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) {
    sleep_ms(unit_milliseconds());
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list grad) {
    sleep_ms(2 * unit_milliseconds());
    return {grad[0]};
  }
};

class TimedChain final : public ddpbench::DefaultConstructedModel<TimedChain> {
 public:
  TimedChain() {
    for (std::size_t i = 0; i < kUnits; ++i) layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(kWidth, kWidth)));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return forward_range(x, 0, kUnits); }
  std::size_t chain_length() const override { return kUnits; }
  std::vector<ddpbench::WrapUnit> wrap_units() override {
    std::vector<ddpbench::WrapUnit> out;
    for (std::size_t i = 0; i < kUnits; ++i) out.push_back({"fc" + std::to_string(i), layers[i]->parameters()});
    return out;
  }

 protected:
  torch::Tensor chain_unit(std::size_t unit, const torch::Tensor& h) override {
    return Sleep::apply(layers.at(unit)->forward(h));  // forward_range calls it through call_unit
  }

 private:
  std::vector<torch::nn::Linear> layers;
};

class TimedChainWorkload final : public ddpbench::Workload {
 public:
  std::string name() const override { return "timed-chain"; }
  std::string description() const override { return "test plug-in: four units of known, equal times (sleeps)"; }
  std::int64_t default_global_batch() const override { return 16; }
  ddpbench::ModelPtr make_model() const override { return std::make_shared<TimedChain>(); }
  ddpbench::Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    auto gen = ddpbench::compat::make_cpu_generator(seed);
    return {torch::randn({size, kWidth}, gen), torch::randint(0, kWidth, {size}, gen, torch::kInt64)};
  }
  double flops_per_sample() const override { return 3.0 * 2.0 * kUnits * kWidth * kWidth; }
};

}  // namespace timed_chain

namespace ddpbench {
using timed_chain::TimedChainWorkload;
DDPBENCH_REGISTER_WORKLOAD(TimedChainWorkload);
}  // namespace ddpbench
